"""The default training preset's wall against a hand-written plain-torch loop run over the same
grid with the same parallelism, measured in the same run.

    python benchmarks/training_grid.py                  # 2 processes, 2 interleaved repeats
    python benchmarks/training_grid.py --jobs 1 --repeats 1

attnlab's side is the command a user types, `python -m attnlab -m +experiment=training
hydra/launcher=joblib hydra.launcher.n_jobs=N` (every sink the preset keeps on), timed from the
process's start to its end. The floor is this file started as a process of its own: a pool of N
fresh processes (one torch thread each) trains, with the loop of training_cost.py, the same GPT
for every variant and seed of the preset's sweep plus each seed's reference, the same steps on the
same task. A second floor adds what the preset measures on the way, hand-written: the fixed
evaluation set at the preset's cadence, teacher-forced and causally (each prefix a forward of its
own). Target: the preset's wall at most 1.3x the first floor's. Walls are the median of
interleaved repeats (preset, floor, floor with evaluations, ...); CPU is the processes' user+system.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
PRESET = Path("attnlab") / "conf" / "experiment" / "training.yaml"
TARGET = 1.3


def grid(src: Path) -> tuple[list[str], list[int]]:
    """The variants and seeds of the preset in `src`, as its sweep lists them (an older preset
    without a seed sweep: its n_seeds seeds from seed 123, the default)."""
    from omegaconf import OmegaConf

    preset = OmegaConf.load(src / PRESET)
    params = preset.hydra.sweeper.params
    if "seed" in params:
        return str(params.variant).split(","), [int(s) for s in str(params.seed).split(",")]
    return str(params.variant).split(","), list(range(123, 123 + preset.n_seeds))


def one_run(job: tuple[str, int, bool]) -> None:
    """One model trained (and, with `evaluations`, evaluated at the preset's cadence) by hand."""
    import torch
    import torch.nn.functional as F

    from attnlab.training.counterparts import counterpart
    from attnlab.training.settings import TrainingConf
    from attnlab.training.start import build
    from attnlab.training.tasks import make_task
    from benchmarks.training_cost import handwritten

    variant, seed, evaluations = job
    torch.set_num_threads(1)
    settings = TrainingConf()
    task = make_task(settings)
    sizes = settings.model
    torch.manual_seed(seed)
    model = build(counterpart(variant, sizes.d_model, sizes.context_length, sizes.num_heads), task.vocab, settings)
    fixed = task.batch(settings.eval_batch, torch.Generator().manual_seed(2**31 - 1), "eval")

    positions = fixed.scored.any(dim=0).nonzero().flatten().tolist()  # the induction task scores every row there
    scores = []

    @torch.no_grad()
    def evaluate() -> None:
        model.eval()
        causal = torch.cat([model(fixed.inputs[:, :p + 1])[:, -1] for p in positions])  # (B * positions, vocab)
        for logits, targets in [(model(fixed.inputs)[fixed.scored], fixed.targets[fixed.scored]),  # teacher-forced
                                (causal, fixed.targets[:, positions].T.flatten())]:
            scores.append((F.cross_entropy(logits, targets).item(), (logits.argmax(-1) == targets).float().mean().item()))
        model.train()

    handwritten(model, task, settings, seed, evaluate if evaluations else None)


def floor(src: Path, jobs: int, evaluations: bool, variants: list[str]) -> None:
    seeds = grid(src)[1]
    runs = [("reference", seed, evaluations) for seed in seeds]
    runs += [(variant, seed, evaluations) for variant in variants for seed in seeds]
    with multiprocessing.get_context("spawn").Pool(jobs) as pool:
        pool.map(one_run, runs, chunksize=1)


def timed(command: list[str], src: Path, env: dict[str, str] | None = None) -> tuple[float, float]:
    """(wall, CPU of the process and the children it waited for) of one command, attnlab imported
    from `src`. A joblib worker or a job worker is not waited for: `--jobs 1` runs the preset's
    jobs in its own process (Hydra's basic launcher, ATTNLAB_ISOLATION=0) so its CPU is counted."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL, cwd=HERE.parent,
                   env={**os.environ, "PYTHONPATH": os.pathsep.join([str(src), str(HERE.parent)]), **(env or {})})
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--src", type=Path, default=HERE.parent / "src",
                        help="the attnlab source the preset runs from (another checkout's, for a before/after)")
    parser.add_argument("--variants", help="a comma-separated part of the preset's variants (both sides)")
    parser.add_argument("--keep", type=Path, help="copy the last preset sweep's training_comparison.md here")
    parser.add_argument("--floor", choices=["train", "evaluations"], help=argparse.SUPPRESS)  # the floor's own process
    args = parser.parse_args()
    if args.floor:
        floor(args.src, args.jobs, args.floor == "evaluations", args.variants.split(","))
        return
    src, load = args.src.resolve(), os.getloadavg()[0]
    variants, seeds = grid(src)
    variants = args.variants.split(",") if args.variants else variants
    sides = {"preset": [], "floor": [], "floor_evals": []}
    floor_args = ["--jobs", str(args.jobs), "--src", str(src), "--variants", ",".join(variants)]
    with tempfile.TemporaryDirectory() as scratch:
        for repeat in range(args.repeats):
            launcher = ["hydra/launcher=joblib", f"hydra.launcher.n_jobs={args.jobs}"] if args.jobs > 1 else []
            sides["preset"].append(timed([sys.executable, "-m", "attnlab", "-m", "+experiment=training", *launcher,
                                          f"hydra.sweep.dir={scratch}/sweep{repeat}", f"variant={','.join(variants)}"],
                                         src, {} if args.jobs > 1 else {"ATTNLAB_ISOLATION": "0"}))
            sides["floor"].append(timed([sys.executable, __file__, "--floor", "train", *floor_args], src))
            sides["floor_evals"].append(timed([sys.executable, __file__, "--floor", "evaluations", *floor_args], src))
        if args.keep:
            shutil.copy(Path(scratch) / f"sweep{args.repeats - 1}" / "training_comparison.md", args.keep)
    wall = {side: statistics.median(w for w, _ in runs) for side, runs in sides.items()}
    cpu = {side: statistics.median(c for _, c in runs) for side, runs in sides.items()}
    ratio = wall["preset"] / wall["floor"]
    print(f"grid: {len(variants)} variants x {len(seeds)} seeds + {len(seeds)} references, 200 steps, "
          f"{args.jobs} processes, {args.repeats} interleaved repeat(s), load average at start {load:.1f}")
    print(f"preset                        {wall['preset']:.1f} s wall, {cpu['preset']:.0f} CPU-s")
    print(f"hand-written loops            {wall['floor']:.1f} s wall, {cpu['floor']:.0f} CPU-s")
    print(f"hand-written, same evaluations {wall['floor_evals']:.1f} s wall, {cpu['floor_evals']:.0f} CPU-s")
    print(f"ratio to the loops            {ratio:.2f}x (target <= {TARGET}x): {'PASS' if ratio <= TARGET else 'FAIL'}")
    print(f"ratio to the loops with the same evaluations {wall['preset'] / wall['floor_evals']:.2f}x")


if __name__ == "__main__":
    main()
