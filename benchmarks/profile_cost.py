"""What `profile=true` costs, and the source's MHA benchmark measured two ways.

    python benchmarks/profile_cost.py                     # both figures at the notebook's size
    python benchmarks/profile_cost.py --only book         # profiling a book-size run: the added seconds
    python benchmarks/profile_cost.py --only nine --batch 2 --n-tokens 256   # a smaller experiment

- book: `attnlab.run("reference")` in process with profile=false and profile=true, interleaved,
  every profiled run measures both modules.
  Target: the profile adds at most 1 s.
- nine: `python -m attnlab -m +experiment=mha_implementations` (nine jobs: capture, diagnosis,
  profile, records and tables) against a hand-written script that times the same nine modules the
  same way (this file with --baseline: the same Timer, budget and no_grad forward, nothing else),
  both as subprocesses, wall clock. Target: within 4x. Prints each module's forward ms and its ratio
  to MultiHeadAttention (impl_mha) from both, beside the notebook's published figures.
"""

from __future__ import annotations

import argparse
import csv
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
NINE = ["impl_wrapper", "impl_mha", "impl_combined_qkv", "impl_einsum", "impl_sdpa", "impl_sdpa_mask",
        "impl_torch_mha", "impl_torch_mha_no_weights", "impl_flex_attention"]
PUBLISHED_MS = {  # the notebook, CPU, PyTorch 2.4, batch 8 x 1024 x 768, 12 heads; no CPU figure for FlexAttention
    "impl_wrapper": 179, "impl_mha": 166, "impl_combined_qkv": 190, "impl_einsum": 196, "impl_sdpa": 110,
    "impl_sdpa_mask": 99.5, "impl_torch_mha": 198, "impl_torch_mha_no_weights": 168,
}


def book(repeats: int) -> None:
    import attnlab

    def once(profiled: bool) -> float:
        start = time.perf_counter()
        attnlab.run("reference", profile=profiled, log={"tensorboard": False})
        return time.perf_counter() - start

    once(False), once(True)  # imports, Hydra's first compose, the timer's first use
    plain, profiled = [], []
    for _ in range(repeats):
        plain.append(once(False))
        profiled.append(once(True))
    added = statistics.median(profiled) - statistics.median(plain)
    verdict = "PASS" if added <= 1.0 else "FAIL"
    print(f"book-size run: profile=false {statistics.median(plain):.3f} s, profile=true "
          f"{statistics.median(profiled):.3f} s (median of {repeats} interleaved): adds {added:.3f} s; "
          f"target <= 1 s: {verdict}")


def baseline(batch: int, n_tokens: int, d: int, heads: int, budget_s: float) -> None:
    """The hand-written script: build the nine, time each forward the way the profile does."""
    import torch

    from attnlab.compute.profile import time_call
    from attnlab.modules.built import plan

    values = dict(d_in=d, d_out=d, context_length=n_tokens, dropout=0.0, num_heads=heads, qkv_bias=False,
                  n_tokens=n_tokens, num_kv_heads=None)
    x = torch.randn(batch, n_tokens, d)
    for name in NINE:
        module = plan(name, values).build(seed=123).module.eval()
        with torch.no_grad():
            module(x)
            median, _ = time_call(lambda: module(x), budget_s / 2)
        print(f"{name} {median:.3f}", flush=True)


def nine(batch: int, n_tokens: int, d: int, heads: int, budget_s: float) -> None:
    sizes = [f"batch={batch}", f"inputs.n_tokens={n_tokens}", f"inputs.d_in={d}", f"d_out={d}", f"num_heads={heads}",
             f"profile_budget_s={budget_s}"]
    env = {**os.environ, "PYTHONWARNINGS": "ignore"}
    with tempfile.TemporaryDirectory() as tmp:
        start = time.perf_counter()
        script = subprocess.run([sys.executable, __file__, "--baseline", "--batch", str(batch), "--n-tokens",
                                 str(n_tokens), "--d", str(d), "--heads", str(heads), "--budget", str(budget_s)],
                                capture_output=True, text=True, check=True, env=env)
        script_s = time.perf_counter() - start
        start = time.perf_counter()
        subprocess.run([sys.executable, "-m", "attnlab", "-m", "+experiment=mha_implementations", *sizes,
                        f"hydra.sweep.dir={tmp}/sweep"], cwd=tmp, capture_output=True, text=True, check=True, env=env)
        harness_s = time.perf_counter() - start
        rows = {row["variant"]: row for row in csv.DictReader(open(f"{tmp}/sweep/comparison.csv"))}
    by_script = dict(line.split() for line in script.stdout.splitlines() if line.startswith("impl_"))
    by_script = {name: float(ms) for name, ms in by_script.items()}
    ratio = harness_s / script_s
    print(f"nine-job experiment (batch {batch} x {n_tokens} x {d}, {heads} heads, profile_budget_s={budget_s}): "
          f"{harness_s:.1f} s, hand-written script {script_s:.1f} s: {ratio:.2f}x; target <= 4x: "
          f"{'PASS' if ratio <= 4 else 'FAIL'}")
    print("| implementation | script ms | vs impl_mha | experiment ms | vs impl_mha | findings | published ms | vs MHA |")
    print("|---|---|---|---|---|---|---|---|")
    for name in NINE:
        row = rows[name]
        ms = float(row["forward_ms"] or "nan")
        published = PUBLISHED_MS.get(name)
        published_ratio = f"{published / PUBLISHED_MS['impl_mha']:.2f}" if published else "n/a"
        print(f"| {name} | {by_script[name]:.1f} | {by_script[name] / by_script['impl_mha']:.2f} | {ms:.1f} | "
              f"{ms / float(rows['impl_mha']['forward_ms']):.2f} | {row['findings'] or 'none'} | "
              f"{published or 'n/a'} | {published_ratio} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", choices=["book", "nine"])
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--n-tokens", type=int, default=1024)
    parser.add_argument("--d", type=int, default=768)
    parser.add_argument("--heads", type=int, default=12)
    parser.add_argument("--budget", type=float, default=1.0, help="profile_budget_s")
    parser.add_argument("--baseline", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.baseline:
        baseline(args.batch, args.n_tokens, args.d, args.heads, args.budget)
        return
    if args.only in (None, "book"):
        book(args.repeats)
    if args.only in (None, "nine"):
        nine(args.batch, args.n_tokens, args.d, args.heads, args.budget)


if __name__ == "__main__":
    main()
