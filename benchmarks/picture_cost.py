"""What the pictures cost at 1,024 tokens x 12 heads.

    python benchmarks/picture_cost.py                 # both figures, 3 interleaved repeats
    python benchmarks/picture_cost.py --repeats 5

- 9a. the pictures' share of a run's wall: `attnlab.run` of a causal 12-head variant at 1,024
  tokens and GPT-2's width (d_in = d_out = 768, batch 1) with the HTML report and its heatmaps
  (log.html=true, log.images=true) against the same run writing its record to the same kind of
  folder with no sink that draws, interleaved in one process; share = (with - without) / with.
  Target: <= 15%. 9a-cli: the same two runs as commands (`python -m attnlab ...`), the wall a
  user waits for, start-up included.
- 9b. `Result._repr_html_` of that run (no out_dir: drawn from the record's values): seconds
  (median) and the HTML's size. Targets: <= 1 s and <= 2 MB. Baseline beside it, measured in the
  same run: the run itself, so the ratio says what the inline view adds to a notebook cell.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
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


def cli_wall(folder: Path, log: dict) -> float:
    words = [f"log.{key}={str(value).lower()}" for key, value in log.items()]
    command = [sys.executable, "-m", "attnlab", "variant=impl_mha", "seed=1", "d_out=768", "num_heads=12",
               "inputs=random", "reference=multi_head_attention", f"hydra.run.dir={folder}", *OVERRIDES, *words]
    start = time.perf_counter()
    subprocess.run(command, check=True, capture_output=True)
    return time.perf_counter() - start


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
        cli_on = [cli_wall(Path(scratch) / f"c{i}", PICTURES) for i in range(repeats)]
        cli_off = [cli_wall(Path(scratch) / f"d{i}", OFF) for i in range(repeats)]
    on, off = statistics.median(with_pictures), statistics.median(without)
    share = (on - off) / on
    print(f"9a. pictures' share of a 1,024-token x 12-head run: {share:.1%} (target <= 15%: "
          f"{'PASS' if share <= 0.15 else 'FAIL'}); with pictures {on:.2f}s, without {off:.2f}s, median of {repeats}")
    c_on, c_off = statistics.median(cli_on), statistics.median(cli_off)
    cli_share = (c_on - c_off) / c_on
    print(f"9a-cli. the same as commands: {cli_share:.1%} (target <= 15%: {'PASS' if cli_share <= 0.15 else 'FAIL'}); "
          f"with pictures {c_on:.2f}s, without {c_off:.2f}s, median of {repeats}")
    seconds, mb = statistics.median(inline), max(sizes) / 2**20
    print(f"9b. _repr_html_ at 1,024 tokens x 12 heads: {seconds:.2f}s (target <= 1 s: "
          f"{'PASS' if seconds <= 1 else 'FAIL'}), {mb:.2f} MB (target <= 2 MB: {'PASS' if mb <= 2 else 'FAIL'}); "
          f"{seconds / off:.2f}x the run it shows ({off:.2f}s)")


if __name__ == "__main__":
    main()
