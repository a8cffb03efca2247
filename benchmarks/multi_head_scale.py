"""Multi-head at scale: wall time, peak RSS and the memory pre-flight's accuracy, each
against a baseline measured in the same run.

    python benchmarks/multi_head_scale.py                 1024 and 4096 tokens, seeds (~10 minutes)
    python benchmarks/multi_head_scale.py --with-8k       also batch 1 x 8192 tokens (several more)
    python benchmarks/multi_head_scale.py --wall-only --repeats 5   13a alone, median of 5 interleaved pairs

The baseline is benchmarks/baselines/multi_head.py: the source's MultiHeadAttention twice with
shared weights, one forward each, per-head entropy scalars and one pooled per-head weights image
per module in TensorBoard, both outputs saved. Peak RSS comes from wait4 of each child process.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

from run import PY, Figure, attnlab, run  # noqa: E402

from attnlab.compute.memory import Size, estimate_peak_bytes, should_spill  # noqa: E402

D, HEADS = 768, 12


def harness_args(n_tokens: int, batch: int, out: Path, *extra: str) -> list[str]:
    return attnlab("variant=multi_head_attention", "inputs=random", f"inputs.n_tokens={n_tokens}",
                   f"inputs.d_in={D}", f"d_out={D}", f"num_heads={HEADS}", f"batch={batch}", "log.terminal=false",
                   f"hydra.run.dir={out}", *extra)


def baseline_args(n_tokens: int, batch: int, out: Path) -> list[str]:
    return [PY, str(HERE / "baselines" / "multi_head.py"), str(out), "--n-tokens", str(n_tokens),
            "--batch", str(batch), "--heads", str(HEADS), "--d", str(D)]


def estimate_error(n_tokens: int, batch: int, measured_kib: int) -> tuple[float, str]:
    size = Size(batch, HEADS, n_tokens, D, D)
    estimate = estimate_peak_bytes(size, spilled=should_spill(size))
    measured = measured_kib * 1024
    return estimate / measured - 1, f"estimate {estimate / 2**30:.2f} GiB, measured {measured / 2**30:.2f} GiB"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--with-8k", action="store_true")
    parser.add_argument("--repeats", type=int, default=1, help="interleaved harness/script pairs for 13a (median)")
    parser.add_argument("--wall-only", action="store_true", help="13a alone")
    args = parser.parse_args(argv)
    root = Path(tempfile.mkdtemp(prefix="attnlab-scale-"))
    figures: list[Figure] = []
    estimates: list[tuple[str, float, str]] = []

    pairs = [(run(harness_args(1024, 2, root / f"h1024-{i}")), run(baseline_args(1024, 2, root / f"b1024-{i}")))
             for i in range(args.repeats)]
    h_wall, b_wall = (statistics.median(pair[side][0] for pair in pairs) for side in (0, 1))
    h_rss = pairs[0][0][1]
    figures.append(Figure("13a. wall at batch 2 x 12 heads x 1024 tokens vs hand-written script", h_wall / b_wall,
                          "<= 2x", 2.0, detail=f"harness {h_wall:.1f}s, script {b_wall:.1f}s, "
                                               f"median of {args.repeats} interleaved"))
    estimates.append(("1024", *estimate_error(1024, 2, h_rss)))

    if args.wall_only:
        print(figures[0].row())
        return 0
    h_wall, h_rss, _ = run(harness_args(4096, 2, root / "h4096"))
    b_wall, b_rss, _ = run(baseline_args(4096, 2, root / "b4096"))
    figures.append(Figure("13b. peak RSS at batch 2 x 12 heads x 4096 tokens vs hand-written script", h_rss / b_rss,
                          "<= 2x", 2.0, detail=f"harness {h_rss / 2**20:.2f} GiB in {h_wall:.0f}s, "
                                               f"script {b_rss / 2**20:.2f} GiB in {b_wall:.0f}s"))
    estimates.append(("4096", *estimate_error(4096, 2, h_rss)))

    if args.with_8k:
        try:
            wall, rss, _ = run(harness_args(8192, 1, root / "h8192"))
            figures.append(Figure("13c. batch 1 x 12 heads x 8192 tokens completes (peak RSS, GiB)", rss / 2**20,
                                  "completes, < 24 GiB", 24.0, unit=" GiB", detail=f"{wall:.0f}s wall"))
            estimates.append(("8192", *estimate_error(8192, 1, rss)))
        except RuntimeError as exc:
            figures.append(Figure("13c. 8192 tokens completes", None, "completes", None, detail=str(exc)[-300:]))

    _, one, _ = run(harness_args(1024, 2, root / "s1"))
    _, twenty, _ = run(harness_args(1024, 2, root / "s20", "n_seeds=20"))
    figures.append(Figure("13d. peak RSS, n_seeds=20 vs n_seeds=1 (batch 2 x 12 heads x 1024)", twenty / one,
                          "<= 1.2x", 1.2, detail=f"{twenty / 2**20:.2f} GiB vs {one / 2**20:.2f} GiB"))
    for size, error, detail in estimates:
        figures.append(Figure(f"13e. pre-flight estimate at {size} tokens, relative error", abs(error) * 100,
                              "<= 30%", 30.0, unit="%", detail=f"{error * 100:+.0f}%: {detail}"))
    for figure in figures:
        print(figure.row())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
