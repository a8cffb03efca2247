"""What the pictures cost at 1,024 tokens x 12 heads (issue 33, issue 31).

    python benchmarks/picture_cost.py                 # both figures, 3 interleaved repeats
    python benchmarks/picture_cost.py --repeats 5

- 8a. the pictures' share of a run's wall: `attnlab.run` of a causal 12-head variant at 1,024
  tokens and GPT-2's width (d_in = d_out = 768, batch 1) with the HTML report and its heatmaps
  (log.html=true, log.images=true) against the same run writing its record to the same kind of
  folder with no sink that draws, interleaved in one process; share = (with - without) / with.
  Target: <= 15%.
- 8b. `Result._repr_html_` of that run (no out_dir: drawn from the record's values): seconds
  (median) and the HTML's size. Targets: <= 1 s and <= 2 MB. Baseline beside it, measured in the
  same run: the run itself, so the ratio says what the inline view adds to a notebook cell.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import attnlab

OVERRIDES = ["inputs.n_tokens=1024", "inputs.d_in=768", "inputs.distribution=normal", "weights_init=normal", "batch=1"]
ARGS = dict(d_out=768, num_heads=12, inputs="random", reference="multi_head_attention", overrides=OVERRIDES)
OFF = {"tensorboard": False, "table": False, "html": False, "terminal": False, "images": False}
PICTURES = {"tensorboard": False, "table": False, "html": True, "terminal": False, "images": True}


def timed_run(folder: Path | None, log: dict) -> tuple[float, attnlab.Result]:
    start = time.perf_counter()
    result = attnlab.run("impl_mha", 1, out_dir=folder, log=log, **ARGS)
    return time.perf_counter() - start, result


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=3)
    repeats = parser.parse_args().repeats
    timed_run(None, OFF)  # warm: imports, the variant's discovery
    with_pictures, without, inline, sizes = [], [], [], []
    with tempfile.TemporaryDirectory() as scratch:
        for i in range(repeats):
            wall, _ = timed_run(Path(scratch) / f"p{i}", PICTURES)
            with_pictures.append(wall)
            wall, result = timed_run(Path(scratch) / f"o{i}", OFF)
            without.append(wall)
            start = time.perf_counter()
            page = result._repr_html_()
            inline.append(time.perf_counter() - start)
            sizes.append(len(page.encode()))
    on, off = statistics.median(with_pictures), statistics.median(without)
    share = (on - off) / on
    print(f"8a. pictures' share of a 1,024-token x 12-head run: {share:.1%} (target <= 15%: "
          f"{'PASS' if share <= 0.15 else 'FAIL'}); with pictures {on:.2f}s, without {off:.2f}s, median of {repeats}")
    seconds, mb = statistics.median(inline), max(sizes) / 2**20
    print(f"8b. _repr_html_ at 1,024 tokens x 12 heads: {seconds:.2f}s (target <= 1 s: "
          f"{'PASS' if seconds <= 1 else 'FAIL'}), {mb:.2f} MB (target <= 2 MB: {'PASS' if mb <= 2 else 'FAIL'}); "
          f"{seconds / off:.2f}x the run it shows ({off:.2f}s)")


if __name__ == "__main__":
    main()
