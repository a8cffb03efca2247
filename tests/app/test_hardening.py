"""What records carry is shown safely, through the real CLI: NaN reads
`nan` in every table, the terminal strips control characters, markdown escapes HTML, CSV text cells
that a spreadsheet would run are neutralised."""

from __future__ import annotations

import csv
import os
import subprocess
import sys
from pathlib import Path

import pytest

from attnlab.record import Record, Side, write_record

pytestmark = pytest.mark.slow


def attnlab(cwd: Path, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    full = {**{k: v for k, v in os.environ.items() if k != "HYDRA_FULL_ERROR"}, **(env or {})}
    return subprocess.run([sys.executable, "-m", "attnlab", *args], cwd=cwd, env=full, capture_output=True, text=True,
                          timeout=600)


def test_a_variant_returning_nan_reads_nan_in_the_sweep_tables(tmp_path) -> None:
    (tmp_path / "plugins").mkdir()
    (tmp_path / "plugins" / "nans.py").write_text(
        "import torch.nn as nn\n\nclass NaNs(nn.Module):\n    def __init__(self, d_in, d_out):\n        super().__init__()\n\n"
        "    def forward(self, x):\n        return x[..., :2] * float('nan')\n")
    done = attnlab(tmp_path, "-m", "variant=nans", "weights=native", f"hydra.sweep.dir={tmp_path / 'sweep'}",
                   "log.tensorboard=false", "log.terminal=false", env={"ATTNLAB_PLUGIN_PATH": str(tmp_path / "plugins")})
    row = next(line for line in done.stdout.splitlines() if line.startswith("nans "))
    assert row.split()[-1] == "nan", done.stdout
    with open(tmp_path / "sweep" / "comparison.csv", newline="") as handle:
        assert next(csv.DictReader(handle))["divergence_output"] == "nan"


def hostile_records(root: Path) -> None:
    write_record(Record(variant=Side("\x1b[31mred\x1b[0m"), seed=1, config={}, status="failed", error="<script>alert(1)</script>"),
                 root / "a")
    write_record(Record(variant=Side("=HYPERLINK(\"http://x\")"), seed=2, config={}, status="failed", error="-1+2"), root / "b")


def test_compare_strips_control_characters_on_the_terminal(tmp_path) -> None:
    hostile_records(tmp_path / "runs")
    done = attnlab(tmp_path, "compare", "runs")
    assert done.returncode == 0 and "\x1b" not in done.stdout and "[31mred[0m" in done.stdout


def test_markdown_escapes_html_and_csv_neutralises_formulas(tmp_path) -> None:
    hostile_records(tmp_path / "runs")
    assert attnlab(tmp_path, "compare", "runs", "--out", "t.md").returncode == 0
    markdown = (tmp_path / "t.md").read_text()
    assert "<script>" not in markdown and "&lt;script&gt;alert(1)&lt;/script&gt;" in markdown
    assert attnlab(tmp_path, "compare", "runs", "--out", "t.csv").returncode == 0
    with open(tmp_path / "t.csv", newline="") as handle:
        rows = {row["seed"]: row for row in csv.DictReader(handle)}
    assert rows["2"]["variant"] == "'=HYPERLINK(\"http://x\")" and rows["2"]["error"] == "'-1+2"
    assert rows["1"]["seed"] == "1"  # numbers are never touched
