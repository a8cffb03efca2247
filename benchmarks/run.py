"""attnlab's performance figures against their targets, on this machine, as ratios.

    python benchmarks/run.py                      every figure (< 10 minutes on 2 cores)
    python benchmarks/run.py --quick              fewer repeats (a smoke run, ~3 minutes)
    python benchmarks/run.py --only cold,capture  a subset: cold sweep seeds scale capture startup isolation
    python benchmarks/run.py --with-16k           also run 16384 tokens (several minutes, ~GBs)
    python benchmarks/run.py --only handwritten   hand-written parts vs the libraries they replace (handwritten.py)

The machine is shared, so every figure is a ratio against a baseline measured in the same run:
medians of interleaved repeats (harness, baseline, harness, baseline, ...), never absolute times.
Prints each figure with its target and PASS/FAIL, and writes benchmarks/out/results.md (untracked;
`--out benchmarks/results.md` replaces the tracked figures that benchmarks/README.md quotes).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
PY = sys.executable
BASELINES = HERE / "baselines"
SWEEP_VARIANTS = "reference,linear,unscaled,wrong_softmax_axis"
SWEEP_SEEDS = "1,2,3,4,5"
SCALE = ["inputs=random", "inputs.n_tokens=4096", "inputs.d_in=64", "d_out=64"]
FIGURES = ("cold", "sweep", "seeds", "scale", "capture", "startup", "handwritten", "isolation", "notebook")


@dataclass
class Figure:
    name: str
    measured: float | None
    target: str  # e.g. "<= 1.3x"
    limit: float | None  # the number the target compares against
    higher_is_better: bool = False
    detail: str = ""
    unit: str = "x"

    @property
    def passed(self) -> bool | None:
        if self.measured is None or self.limit is None:
            return None
        return self.measured >= self.limit if self.higher_is_better else self.measured <= self.limit

    @property
    def verdict(self) -> str:
        if self.limit is None:
            return "ERROR" if self.detail.startswith("error") else "INFO"
        if self.passed is None:
            return "ERROR"
        gap = abs(self.measured - self.limit)
        if self.unit == "x" and self.measured > 0:  # ratios: by how many times
            factor = self.measured / self.limit if self.measured > self.limit else self.limit / self.measured
            how = f"{'over' if self.measured > self.limit else 'under'} by {factor:.2f}x"
        else:
            how = f"{gap:.3g}{self.unit} {'over' if self.measured > self.limit else 'under'}"
        return f"{'PASS' if self.passed else 'FAIL'} ({how})"

    def row(self) -> str:
        shown = "—" if self.measured is None else f"{self.measured:.3g}{self.unit}"
        return f"| {self.name} | {shown} | {self.target} | {self.verdict} | {self.detail} |"


# ---------------------------------------------------------------- running things


def run(cmd: list[str], *, env: dict | None = None, cwd: Path | None = None) -> tuple[float, int, str]:
    """Wall seconds, peak RSS (KiB, from wait4) and combined output of one child process."""
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=cwd, env={**os.environ, **(env or {})}, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    output = proc.stdout.read()
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} exited {proc.returncode}:\n{output[-2000:]}")
    return wall, usage.ru_maxrss, output


def attnlab(*args: str) -> list[str]:
    return [PY, "-m", "attnlab", *args]


def interleaved(commands: dict, repeats: int, envs: dict | None = None) -> dict[str, list[float]]:
    """Run each command once per round, the order rotated each round; walls per command
    (`envs`: extra environment variables of some commands, by name)."""
    walls: dict[str, list[float]] = {name: [] for name in commands}
    names = list(commands)
    for i in range(repeats):
        order = names[i % len(names):] + names[: i % len(names)]
        for name in order:
            walls[name].append(run(commands[name](), env=(envs or {}).get(name))[0])
    return walls


class Scratch:
    def __init__(self) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="attnlab-bench-"))
        self.n = 0

    def new(self, stem: str) -> Path:
        self.n += 1
        return self.root / f"{stem}-{self.n}"


def med(values: list[float]) -> float:
    return statistics.median(values)


def fmt_s(values: list[float]) -> str:
    return f"{med(values):.2f}s"


# ---------------------------------------------------------------- figures


def fig_cold(s: Scratch, repeats: int) -> list[Figure]:
    walls = interleaved({
        "harness": lambda: attnlab("variant=unscaled", f"hydra.run.dir={s.new('cold')}"),
        "baseline": lambda: [PY, str(BASELINES / "single.py"), str(s.new("cold-base"))],
    }, repeats)
    ratio = med(walls["harness"]) / med(walls["baseline"])
    return [Figure("1. cold single run vs hand-written script", ratio, "<= 1.3x", 1.3,
                   detail=f"harness {fmt_s(walls['harness'])}, script {fmt_s(walls['baseline'])}, "
                          f"median of {repeats} interleaved")]


def fig_isolation(s: Scratch, repeats: int) -> list[Figure]:
    """What running each job in a job worker costs (attnlab.app.job_worker), against the same
    command with ATTNLAB_ISOLATION=0 (every job in the CLI's process, guarded only)."""
    inprocess = {"ATTNLAB_ISOLATION": "0"}
    single = ["variant=unscaled", "timeout_s=600"]  # timeout_s isolates a single run too
    walls = interleaved({
        "single": lambda: attnlab(*single, f"hydra.run.dir={s.new('iso1')}"),
        "single_in": lambda: attnlab(*single, f"hydra.run.dir={s.new('iso1-in')}"),
        "sweep": lambda: attnlab(*sweep_args(s.new("iso20"))),
        "sweep_in": lambda: attnlab(*sweep_args(s.new("iso20-in"))),
    }, repeats, envs={"single_in": inprocess, "sweep_in": inprocess})
    one, sweep = (med(walls[k]) / med(walls[f"{k}_in"]) for k in ("single", "sweep"))
    per_job = (med(walls["sweep"]) - med(walls["sweep_in"]) - (med(walls["single"]) - med(walls["single_in"]))) / 19
    return [
        Figure("7a. a single run in a job worker (timeout_s) vs in-process", one, "report", None,
               detail=f"isolated {fmt_s(walls['single'])}, in-process {fmt_s(walls['single_in'])}: the forkserver "
                      "imports torch and the plugins beside the command's own start; a single run stays in-process by default"),
        Figure("7b. 20-job sweep, every job in a job worker vs in-process", sweep, "report", None,
               detail=f"isolated {fmt_s(walls['sweep'])}, in-process {fmt_s(walls['sweep_in'])}; "
                      f"{per_job * 1000:.0f} ms a job beyond the forkserver's start"),
    ]


def sweep_args(out: Path) -> list[str]:
    return ["-m", f"variant={SWEEP_VARIANTS}", f"seed={SWEEP_SEEDS}", f"hydra.sweep.dir={out}"]


def noop_args(out: Path) -> list[str]:
    return [PY, str(BASELINES / "noop_app.py"), "-m", "+variant=a,b,c,d", f"+seed={SWEEP_SEEDS}",
            f"hydra.sweep.dir={out}"]


def fig_sweep(s: Scratch, repeats: int) -> list[Figure]:
    walls = {"harness": [], "harness_basic": [], "noop": [], "noop_torch": [], "noop_1": []}
    for i in range(repeats):
        steps = [
            ("harness", lambda: run(attnlab(*sweep_args(s.new("sweep"))))),
            ("harness_basic", lambda: run(attnlab(*sweep_args(s.new("sweep-basic")), "hydra/sweeper=basic"))),
            ("noop", lambda: run(noop_args(s.new("noop")))),
            ("noop_torch", lambda: run(noop_args(s.new("noop-t")), env={"NOOP_IMPORT_TORCH": "1"})),
            ("noop_1", lambda: run([PY, str(BASELINES / "noop_app.py"), f"hydra.run.dir={s.new('noop1')}"])),
        ]
        for name, step in steps[i % len(steps):] + steps[: i % len(steps)]:
            walls[name].append(step()[0])
    h, n, nt = med(walls["harness"]), med(walls["noop"]), med(walls["noop_torch"])
    hb = med(walls["harness_basic"])
    hydra_per_job = (n - med(walls["noop_1"])) / 19
    # the job's own work, in process
    _, _, out = run([PY, str(HERE / "inprocess.py"), "jobs", str(s.new("sweep-inproc")),
                     f"variant={SWEEP_VARIANTS}", f"seed={SWEEP_SEEDS}"])
    timing = json.loads(out.strip().splitlines()[-1])
    job_ms = med(timing["job"]) * 1000
    job_mean_ms = statistics.mean(timing["job"]) * 1000
    parts = {k: med(timing[k]) * 1000 for k in ("compute", "outputs", "tensorboard", "callback") if timing[k]}
    return [
        Figure("2a. 20-job sweep vs no-op Hydra app (no torch)", h / n, "<= 1.3x", 1.3,
               detail=f"harness {h:.2f}s, no-op {n:.2f}s; Hydra alone {hydra_per_job * 1000:.0f} ms/job; any app "
                      f"that imports torch starts at {nt / n:.2f}x (the no-op importing torch)"),
        Figure("2b. 20-job sweep vs no-op Hydra app importing torch", h / nt, "<= 1.3x", 1.3,
               detail=f"harness {h:.2f}s, no-op+torch {nt:.2f}s"),
        Figure("2d. the same sweep with hydra/sweeper=basic, vs no-op Hydra app", hb / n, "report", None,
               detail=f"{hb:.2f}s: Hydra's own sweeper composes every job twice, attnlab's sweeper "
                      f"{(hb - h) / 20 * 1000:.0f} ms/job less"),
        Figure("2c. a job's own work (run_job, in process, median of 20)", job_ms, "<= 50 ms", 50, unit=" ms",
               detail="mean {mean:.0f} ms; compute {compute:.0f} ms, outputs {outputs:.0f} ms (of which TensorBoard "
                      "{tensorboard:.0f} ms); plus sweep-table callback {callback:.0f} ms/job (not the job's)".format(
                          mean=job_mean_ms,
                          **{k: parts.get(k, float("nan")) for k in ("compute", "outputs", "tensorboard", "callback")})),
    ]


def fig_seeds(s: Scratch, repeats: int) -> list[Figure]:
    walls = interleaved({
        "one": lambda: attnlab("variant=unscaled", f"hydra.run.dir={s.new('seeds1')}"),
        "hundred": lambda: attnlab("variant=unscaled", "n_seeds=100", f"hydra.run.dir={s.new('seeds100')}"),
        "torch": lambda: [PY, "-c", "import torch"],
    }, repeats)
    one, hundred, torch_import = med(walls["one"]), med(walls["hundred"]), med(walls["torch"])
    # the 100-job multirun itself, once: ~100 x Hydra's per-job cost, too long to repeat
    multirun100 = run(attnlab("-m", "variant=unscaled", "seed=range(123,223)", f"hydra.sweep.dir={s.new('sw100')}"))[0]
    per_job = (multirun100 - one) / 99
    per_seed = (hundred - one) / 99
    return [
        Figure("3a. n_seeds=100 vs n_seeds=1 (one job)", hundred / one, "<= 2x", 2.0,
               detail=f"{hundred:.2f}s vs {one:.2f}s; {per_seed * 1000:.0f} ms per extra seed"),
        Figure("3b. 100-job multirun / n_seeds=100 (whole wall)", multirun100 / hundred, ">= 20x", 20.0,
               higher_is_better=True,
               detail=f"{multirun100:.1f}s (measured once) vs {hundred:.2f}s; 20x needs n_seeds=100 in "
                      f"{multirun100 / 20:.2f}s, and `import torch` alone takes {torch_import:.2f}s"),
        Figure("3c. per extra seed: multirun job / n_seeds seed (marginal)", per_job / per_seed, ">= 20x", 20.0,
               higher_is_better=True,
               detail=f"{per_job * 1000:.0f} ms per multirun job vs {per_seed * 1000:.0f} ms per seed in one job"),
    ]


def fig_scale(s: Scratch, with_16k: bool) -> list[Figure]:
    h_wall, h_rss, _ = run(attnlab(*SCALE, "log.terminal=false", f"hydra.run.dir={s.new('scale')}"))
    b_wall, b_rss, _ = run([PY, str(BASELINES / "single.py"), str(s.new("scale-base")), "--n-tokens", "4096",
                            "--d-in", "64", "--d-out", "64"])
    record = next(s.root.glob("scale-*/record.json"))
    size_kb = record.stat().st_size / 1024
    figures = [Figure("4a. peak RSS at 4096 tokens vs hand-written script", h_rss / b_rss, "<= 2x", 2.0,
                      detail=f"harness {h_rss / 1024:.0f} MiB in {h_wall:.1f}s, script {b_rss / 1024:.0f} MiB "
                             f"in {b_wall:.1f}s; record.json {size_kb:.0f} KiB")]
    if with_16k:
        try:
            wall, rss, _ = run(attnlab("inputs=random", "inputs.n_tokens=16384", "inputs.d_in=64", "d_out=64",
                                       "log.terminal=false", f"hydra.run.dir={s.new('scale16k')}"))
            figures.append(Figure("4b. 16384 tokens completes (peak RSS, GiB)", rss / 2**20, "completes, < 24 GiB",
                                  24.0, unit=" GiB", detail=f"{wall:.0f}s wall"))
        except RuntimeError as exc:
            figures.append(Figure("4b. 16384 tokens completes", None, "completes", None, detail="error: " + str(exc)[:200]))
    return figures


def fig_capture(s: Scratch, repeats: int) -> list[Figure]:
    _, _, out = run([PY, str(HERE / "inprocess.py"), "capture", "4096", "64", "64", str(repeats)])
    data = json.loads(out.strip().splitlines()[-1])
    overhead = (data["capture"] / data["plain"] - 1) * 100
    return [Figure("5. stage capture overhead, forward at 4096 tokens", overhead, "<= 10%", 10.0, unit="%",
                   detail=f"forward {data['plain'] * 1000:.0f} ms, with capture {data['capture'] * 1000:.0f} ms, "
                          f"median of {repeats} interleaved")]


def import_costs(args: list[str], s: Scratch) -> dict[str, int]:
    """Cumulative import time (us) of every top-level package, from python -X importtime."""
    _, _, out = run([PY, "-X", "importtime", "-m", "attnlab", *args, f"hydra.run.dir={s.new('imp')}"])
    costs: dict[str, int] = {}
    for line in out.splitlines():
        m = re.match(r"import time:\s+\d+ \|\s+(\d+) \|( *)(\S+)", line)
        if m:
            top = m.group(3).split(".")[0]
            if m.group(3) == top:  # a package's own line carries its cumulative time
                costs[top] = max(costs.get(top, 0), int(m.group(1)))
    return costs


def fig_startup(s: Scratch) -> list[Figure]:
    # The HTML report draws its maps with Pillow too (from the record's values when the job
    # kept no PNGs): PIL is lazy when neither sink that draws is on.
    off = import_costs(["log.tensorboard=false", "log.terminal=false"], s)
    no_images = import_costs(["log.tensorboard=false", "log.terminal=false", "log.html=false"], s)
    on = import_costs(["log.terminal=false"], s)
    lazy = [name for name, imported in (("tensorboard", off), ("PIL", no_images)) if name in imported]
    top = sorted(((k, v) for k, v in on.items() if k != "attnlab"), key=lambda kv: -kv[1])[:6]
    return [
        Figure("6a. tensorboard imported with its sink off, PIL with no sink that draws", float(len(lazy)), "0 modules", 0.0,
               unit="", detail="imported: " + (", ".join(lazy) or "none")),
        Figure("6b. start-up imports, top costs (all sinks on)", None, "report", None, unit="",
               detail=", ".join(f"{name} {us / 1e6:.2f}s" for name, us in top)),
    ]


def fig_handwritten(repeats: int) -> list[Figure]:
    """Each hand-written part against its library (benchmarks/handwritten.py), reported as
    attnlab / library: the decision they support is in benchmarks/README.md."""
    _, _, out = run([PY, str(HERE / "handwritten.py"), "--json", "--repeats", str(repeats)])
    figures = []
    for c in json.loads(out.strip().splitlines()[-1]):
        name = f"7. {c['part']}, {c['size']}: attnlab / {c['library']}"
        if c["skipped"]:
            figures.append(Figure(name, None, "report", None, unit="x", detail="skipped: " + c["skipped"]))
        else:
            figures.append(Figure(name, c["ratio"], "report", None,
                                  detail=f"{c['ours_ms']:.3g} ms vs {c['library_ms']:.3g} ms; {c['detail']}"))
    return figures


# ---------------------------------------------------------------- the report


def machine() -> str:
    cpu = platform.processor() or "unknown CPU"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    torch_version = subprocess.run([PY, "-c", "import torch; print(torch.__version__)"], capture_output=True,
                                   text=True).stdout.strip()
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    return (f"nproc {os.cpu_count()}, {cpu}, torch {torch_version}, Python {platform.python_version()}, "
            f"{platform.system()} {platform.release()}, load average at start {load:.1f}")


def fig_notebook(s: Scratch, repeats: int) -> list[Figure]:
    """attnlab.run as a notebook's first cell runs it (a fresh process: import, compose, the job,
    its files) against the CLI's single run of the same variant; then warm calls in one process
    against the job's own work inside them (run_job): figures 8a and 8b."""
    # os._exit: a kernel is not torn down after its cell, and the CLI skips the teardown too (cli.exit_fast)
    first = lambda: [PY, "-c", f"import os, attnlab; attnlab.run('unscaled', out_dir={str(s.new('nb'))!r}); os._exit(0)"]  # noqa: E731
    walls = interleaved({
        "api": first,
        "cli": lambda: attnlab("variant=unscaled", f"hydra.run.dir={s.new('nb-cli')}"),
    }, repeats)
    _, _, out = run([PY, str(HERE / "inprocess.py"), "api", "20"])
    warm = json.loads(out.strip().splitlines()[-1])
    return [
        Figure("8a. first attnlab.run in a fresh process vs the CLI's single run", med(walls["api"]) / med(walls["cli"]),
               "<= 1.3x", 1.3, detail=f"attnlab.run {fmt_s(walls['api'])}, CLI {fmt_s(walls['cli'])}, "
                                      f"median of {repeats} interleaved"),
        Figure("8b. a warm attnlab.run vs its job's own work (run_job)", warm["call"] / warm["job"], "<= 1.2x", 1.2,
               detail=f"call {warm['call'] * 1000:.1f} ms, run_job {warm['job'] * 1000:.1f} ms, median of 20"),
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer repeats (a smoke run)")
    parser.add_argument("--only", default=",".join(FIGURES), help=f"comma-separated subset of {', '.join(FIGURES)}")
    parser.add_argument("--repeats", type=int, help="interleaved repeats per figure (default 5, quick 1)")
    parser.add_argument("--with-16k", action="store_true", help="also run 16384 tokens (slow, several GiB)")
    # The default is untracked, so a trial run never rewrites the recorded figures in results.md.
    parser.add_argument("--out", type=Path, default=HERE / "out" / "results.md",
                        help="markdown results file (default benchmarks/out/results.md, untracked)")
    args = parser.parse_args(argv)
    chosen = [name.strip() for name in args.only.split(",") if name.strip()]
    unknown = set(chosen) - set(FIGURES)
    if unknown:
        parser.error(f"unknown figure(s): {', '.join(sorted(unknown))}; choose from {', '.join(FIGURES)}")
    repeats = args.repeats or (1 if args.quick else 5)
    where = machine()
    print(f"machine: {where}\nrepeats: {repeats}\n", flush=True)
    scratch, figures = Scratch(), []
    started = time.perf_counter()
    steps = {
        "cold": lambda: fig_cold(scratch, repeats),
        "sweep": lambda: fig_sweep(scratch, max(1, min(repeats, 3))),
        "seeds": lambda: fig_seeds(scratch, repeats),
        "scale": lambda: fig_scale(scratch, args.with_16k),
        "capture": lambda: fig_capture(scratch, 3 if args.quick else 9),
        "startup": lambda: fig_startup(scratch),
        "handwritten": lambda: fig_handwritten(repeats),
        "isolation": lambda: fig_isolation(scratch, max(1, min(repeats, 3))),
        "notebook": lambda: fig_notebook(scratch, repeats),
    }
    try:
        for name in FIGURES:
            if name in chosen:
                for figure in steps[name]():
                    figures.append(figure)
                    print(f"{figure.name}: {figure.row().split('|')[2].strip()} target {figure.target} -> "
                          f"{figure.verdict}; {figure.detail}", flush=True)
    finally:
        shutil.rmtree(scratch.root, ignore_errors=True)
    elapsed = time.perf_counter() - started
    lines = [
        "# attnlab benchmark results", "",
        f"Machine: {where}.", f"Run: `python benchmarks/run.py {' '.join(argv if argv is not None else sys.argv[1:])}` "
        f"({repeats} interleaved repeat(s), {elapsed / 60:.1f} min, {time.strftime('%Y-%m-%d %H:%M')}).", "",
        "| figure | measured | target | verdict | detail |", "|---|---|---|---|---|",
        *(f.row() for f in figures), "",
    ]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text("\n".join(lines), encoding="utf-8")
    print(f"\nwritten: {args.out} ({elapsed:.0f}s)")
    return 0 if all(f.passed is not False for f in figures) else 1


if __name__ == "__main__":
    sys.exit(main())
