"""Issue 52's "speed of the peers": every layer's attention and a layer x head ablation sweep, each
as a ratio to a baseline measured in the same run.

    python benchmarks/peers_speed.py                          # both parts, GPT-2 small's shape
    python benchmarks/peers_speed.py --part layers --n-tokens 128
    python benchmarks/peers_speed.py --part sweep --n-layer 2  # 24 edits: a quick check

A GPT-2-shaped model with random weights is built from its config and saved once with
save_pretrained; every side loads it from that folder.
- every layer: `layer=all intervene=observe` (each layer's stages captured in one forward, each
  diagnosed, its heads' patterns; sinks off) against the model's own forward with
  `output_attentions=True`, loading included on both sides: from Python in this process
  (attnlab.run against transformers), and from the command line (`python -m attnlab ...` against a
  fresh interpreter running the same forward). Target: at most 2x, at 128 and 1,024 tokens.
- the sweep: the form the models guide shows first, `python -m attnlab -m model.path=DIR inputs=text
  ... layer=0,...,L-1 intervene=ablate_head intervene.head=0,...,H-1` (one job per edit, the default
  outputs), against a hand-written loop in a fresh interpreter: the model loaded once, its forward
  once, then per (layer, head) a forward pre-hook on the layer's output projection zeroing the
  head's slice of its input, the edited forward, and its KL and top-1 agreement against the
  unedited one (what TransformerLens' and nnsight's loops do). Target: at most 1.3x.
Times: medians of --repeats rounds after a warm-up (the sweep: one round), wall and CPU seconds
(this process's, or the waited-for children's), the load average before each figure. Torch on one
thread on both sides (OMP_NUM_THREADS=1): the machine is shared.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from model_cost import attnlab_run, hf_forward, save_model, text_of, timed  # noqa: E402  (beside this script)

ONE_THREAD = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
SINKS_OFF = ["log.tensorboard=false", "log.table=false", "log.html=false"]


def children_timed(cmd: list[str], cwd: Path) -> tuple[float, float]:
    """(wall, CPU) seconds of a command run to its end; CPU is what the waited-for processes used
    (a sweep's job workers, ended by their server, are not counted: see the sweep's note)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    wall = time.perf_counter()
    done = subprocess.run(cmd, cwd=cwd, env=ONE_THREAD, capture_output=True, text=True)
    wall = time.perf_counter() - wall
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(cmd[:6])} ... failed ({done.returncode}):\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}")
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def medians(runs: dict[str, Callable[[], tuple[float, float]]], repeats: int) -> dict[str, tuple[float, float, float]]:
    """Each run's median (wall, CPU) over `repeats` interleaved rounds after a warm-up, and the load before them."""
    for run in runs.values():
        run()
    load = os.getloadavg()[0]
    times: dict[str, list[tuple[float, float]]] = {name: [] for name in runs}
    for _ in range(repeats):
        for name, run in runs.items():
            times[name].append(run())
    return {name: (statistics.median(w for w, _ in v), statistics.median(c for _, c in v), load)
            for name, v in times.items()}


def line(name: str, side: tuple[float, float, float], base: tuple[float, float, float], target: float) -> bool:
    wall, cpu = side[0] / base[0], side[1] / base[1]
    ok = wall <= target and cpu <= target
    print(f"| {name} | wall {wall:.2f}x, CPU {cpu:.2f}x | <= {target}x | {'PASS' if ok else 'FAIL'} | "
          f"{side[0]:.2f} s wall, {side[1]:.2f} CPU-s against {base[0]:.2f} s, {base[1]:.2f} CPU-s; "
          f"load {side[2]:.1f} |", flush=True)
    return ok


def loaded_afresh(run: Callable[[], tuple[float, float]]) -> Callable[[], tuple[float, float]]:
    """`run` with the process's kept saved model let go first, so that its loading counts as the forward's does."""
    def afresh() -> tuple[float, float]:
        from attnlab.model import loading

        loading._last_saved = None
        return run()

    return afresh


def every_layer(folder: Path, work: Path, n_tokens: int, repeats: int) -> list[bool]:
    text = text_of(n_tokens)
    hf_cli = [sys.executable, "-c", f"import sys; sys.path.insert(0, {str(HERE)!r}); import torch; "
              f"torch.set_num_threads(1); import model_cost; model_cost.hf_forward({str(folder)!r}, {text!r})"]
    cli = [sys.executable, "-m", "attnlab", f"model.path={folder}", "inputs=text", f"inputs.text='{text}'", "layer=all",
           "intervene=observe", *SINKS_OFF, "log.terminal=false"]
    runs = {"forward": lambda: hf_forward(folder, text),
            "python": loaded_afresh(lambda: attnlab_run(folder, text, "layer=all", "intervene=observe")),
            "forward_cli": lambda: children_timed(hf_cli, work),
            "cli": lambda: children_timed([*cli, f"hydra.run.dir={tempfile.mkdtemp(dir=work)}"], work)}
    took = medians(runs, repeats)
    return [line(f"{n_tokens} tokens: every layer from Python / the forward", took["python"], took["forward"], 2.0),
            line(f"{n_tokens} tokens: every layer from the CLI / the forward in a fresh interpreter", took["cli"],
                 took["forward_cli"], 2.0)]


def hook_loop(folder: str | Path, text: str, n_layer: int, n_head: int) -> list[tuple[int, int, float, int]]:
    """The hand-written loop over every (layer, head) zero ablation: the model loaded once, its forward
    once, then per edit a pre-hook on the layer's output projection and one forward; (layer, head,
    mean KL, top-1 agreements) per edit."""
    import torch
    from transformers import GPT2LMHeadModel

    from attnlab.inputs.text import gpt2_encoding

    torch.set_num_threads(1)
    model = GPT2LMHeadModel.from_pretrained(folder, attn_implementation="eager").eval()
    ids = torch.tensor([gpt2_encoding().encode(text)])  # (1, T)
    width = model.config.n_embd // n_head
    table = []
    with torch.no_grad():
        base = torch.log_softmax(model(ids, use_cache=False).logits[0].double(), dim=-1)  # (T, vocab)
        for layer in range(n_layer):
            for head in range(n_head):
                def zero(_module, args, head=head):
                    context = args[0].clone()  # (1, T, d): the output projection's input, heads side by side
                    context[..., head * width:(head + 1) * width] = 0
                    return (context,)

                hook = model.transformer.h[layer].attn.c_proj.register_forward_pre_hook(zero)
                edited = torch.log_softmax(model(ids, use_cache=False).logits[0].double(), dim=-1)  # (T, vocab)
                hook.remove()
                kl = (base.exp() * (base - edited)).sum(-1)  # (T,)
                table.append((layer, head, float(kl.mean()), int((base.argmax(-1) == edited.argmax(-1)).sum())))
    return table


def one_run_words(folder: Path, text: str) -> list[str]:
    """The form the models guide shows first: every (layer, head) ablation in one run."""
    return [f"model.path={folder}", "inputs=text", f"inputs.text='{text}'", "layer=all", "intervene=ablate_head",
            "intervene.head=all"]


def one_run(folder: Path, work: Path, n_tokens: int, n_layer: int, repeats: int) -> list[bool]:
    """`layer=all intervene=ablate_head intervene.head=all` (one run, default outputs: the records, the
    table and grid, the HTML report, TensorBoard) against the hand-written loop, from Python in this
    process and from the command line against the loop in a fresh interpreter; the same cells checked."""
    import attnlab

    text = text_of(n_tokens)
    results: list[object] = []

    def ours() -> tuple[float, float]:
        from attnlab.model import loading

        loading._last_saved = None  # loaded afresh, as the loop loads it
        out = Path(tempfile.mkdtemp(dir=work))
        return timed(lambda: results.append(attnlab.run(overrides=one_run_words(folder, text), out_dir=out)))

    loops: list[list[tuple[int, int, float, int]]] = []
    loop_cli = [sys.executable, str(Path(__file__).resolve()), "--hook-loop", str(folder), text, str(n_layer), "12"]
    cli = [sys.executable, "-m", "attnlab", *one_run_words(folder, text)]
    runs = {"loop": lambda: timed(lambda: loops.append(hook_loop(folder, text, n_layer, 12))),
            "python": ours,
            "loop_cli": lambda: children_timed(loop_cli, work),
            "cli": lambda: children_timed([*cli, f"hydra.run.dir={tempfile.mkdtemp(dir=work)}"], work)}
    took = medians(runs, repeats)
    grid = {(r.record.model.layer, h): e.kl_mean for r in results[-1]  # type: ignore[attr-defined]
            for h, e in zip(r.record.model.edited_heads, r.record.model.head_effects)}
    worst = max(abs(grid[layer, head] - kl) / kl for layer, head, kl, _ in loops[-1])
    print(f"the same {len(grid)} cells: largest relative difference from the loop's KL {worst:.2g}", flush=True)
    edits = n_layer * 12
    return [line(f"{edits} ablations at {n_tokens} tokens, one run from Python / the loop in this process",
                 took["python"], took["loop"], 1.3),
            line(f"{edits} ablations at {n_tokens} tokens, one run from the CLI / the loop in a fresh interpreter",
                 took["cli"], took["loop_cli"], 1.3)]


def sweep(folder: Path, work: Path, n_tokens: int, n_layer: int, n_head: int) -> bool:
    text = text_of(n_tokens)
    layers, heads = ",".join(map(str, range(n_layer))), ",".join(map(str, range(n_head)))
    loop = [sys.executable, str(Path(__file__).resolve()), "--hook-loop", str(folder), text, str(n_layer), str(n_head)]
    load = os.getloadavg()[0]
    base = (*children_timed(loop, work), load)
    load = os.getloadavg()[0]
    out = work / "sweep"
    ours = (*children_timed([sys.executable, "-m", "attnlab", "-m", f"model.path={folder}", "inputs=text",
                             f"inputs.text='{text}'", f"layer={layers}", "intervene=ablate_head",
                             f"intervene.head={heads}", f"hydra.sweep.dir={out}"], work), load)
    edits = n_layer * n_head
    ok = ours[0] / base[0] <= 1.3
    print(f"| {edits} ablations at {n_tokens} tokens: the guide's sweep / a hand-written hook loop | wall "
          f"{ours[0] / base[0]:.2f}x | <= 1.3x | {'PASS' if ok else 'FAIL'} | {ours[0]:.1f} s wall "
          f"({ours[0] / edits:.2f} s an edit) against {base[0]:.1f} s ({base[1]:.1f} CPU-s); load {ours[2]:.1f} and "
          f"{base[2]:.1f}; the sweep's CPU not counted (its job workers are not waited for) |", flush=True)
    return ok


def main() -> int:
    if sys.argv[1:2] == ["--hook-loop"]:
        folder, text, n_layer, n_head = sys.argv[2:6]
        for row in hook_loop(folder, text, int(n_layer), int(n_head)):
            print(*row)
        return 0
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--part", choices=("layers", "sweep", "one-run", "both"), default="both")
    parser.add_argument("--n-tokens", default="128,1024", help="every layer's token counts, comma-separated")
    parser.add_argument("--sweep-tokens", type=int, default=128)
    parser.add_argument("--n-layer", type=int, default=12)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    import torch

    torch.set_num_threads(1)
    print(f"load average at start {os.getloadavg()[0]:.1f}; nproc {os.cpu_count()}; GPT-2 small's shape, "
          f"{args.n_layer} layers")
    print("| figure | measured | target | verdict | detail |\n|---|---|---|---|---|")
    results = []
    with tempfile.TemporaryDirectory(prefix="attnlab-peers-") as tmp:
        work = Path(tmp)
        folder = save_model(work / "gpt2", args.n_layer)
        if args.part in ("layers", "both"):
            for n_tokens in (int(n) for n in args.n_tokens.split(",")):
                results += every_layer(folder, work, n_tokens, args.repeats)
        if args.part in ("one-run", "both"):
            results += one_run(folder, work, args.sweep_tokens, args.n_layer, args.repeats)
        if args.part == "sweep":  # 144 jobs: hours on a shared machine, by hand only
            results.append(sweep(folder, work, args.sweep_tokens, args.n_layer, 12))
    return 0 if all(results) else 1


if __name__ == "__main__":
    sys.exit(main())
