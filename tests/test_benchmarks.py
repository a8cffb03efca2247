"""The benchmark script runs: its quick mode prints a figure with its target (no timing asserted)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_quick_mode_prints_a_figure_and_its_target(tmp_path):
    out = tmp_path / "results.md"
    proc = subprocess.run([sys.executable, str(REPO / "benchmarks" / "run.py"), "--quick", "--only", "capture",
                           "--out", str(out)], capture_output=True, text=True, timeout=600)
    assert "stage capture overhead" in proc.stdout and "target <= 10%" in proc.stdout, proc.stdout + proc.stderr
    assert any(verdict in proc.stdout for verdict in ("PASS", "FAIL"))
    table = out.read_text()
    assert "| figure | measured | target | verdict | detail |" in table and "nproc" in table


@pytest.mark.slow
def test_by_default_the_results_go_to_an_untracked_file_not_the_recorded_one(tmp_path):
    copy = tmp_path / "benchmarks"  # a copy, so that the run cannot touch this checkout's files
    shutil.copytree(REPO / "benchmarks", copy, ignore=shutil.ignore_patterns("out", "__pycache__"))
    recorded = (copy / "results.md").read_text()
    proc = subprocess.run([sys.executable, str(copy / "run.py"), "--quick", "--only", "capture"],
                          capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert proc.returncode in (0, 1), proc.stdout + proc.stderr  # 1: a target missed, still written
    assert (copy / "results.md").read_text() == recorded
    assert "| figure | measured |" in (copy / "out" / "results.md").read_text()
    assert "benchmarks/out/" in (REPO / ".gitignore").read_text().splitlines()


@pytest.mark.slow
def test_hand_written_parts_are_compared_and_a_missing_library_is_a_clear_skip(tmp_path):
    # matplotlib, tqdm and rich hidden as if never installed: their comparisons must say so and the rest run.
    hide = "import sys, runpy; sys.modules.update(matplotlib=None, tqdm=None, rich=None); "
    script = REPO / "benchmarks" / "handwritten.py"
    proc = subprocess.run([sys.executable, "-c", hide + f"sys.argv = ['x', '--repeats', '1']; "
                           f"runpy.run_path({str(script)!r}, run_name='__main__')"],
                          capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    assert ("heatmap render+encode (6 tokens) attnlab / matplotlib: skipped: matplotlib is not installed "
            "(pip install -c constraints.txt -e '.[bench]'; a benchmark-only library, not an attnlab dependency)") in lines
    assert any(line.startswith("progress (100 updates) attnlab / tqdm: skipped: tqdm is not installed") for line in lines)
    for measured in ("PNG encode (4096 tokens) attnlab / Pillow: ", "hparams protos (6 tokens) attnlab / torch summary.hparams: "):
        assert any(line.startswith(measured) and line[len(measured)].isdigit() for line in lines), proc.stdout
    assert "torch summary.hparams NO" in proc.stdout  # the bug the hand-built protos work around


def test_the_bench_extra_holds_every_library_the_hand_written_parts_are_compared_with():
    """In the .[dev] venv the matplotlib, tqdm and rich comparisons were skipped and the
    README named no extra that installs them."""
    import re
    import tomllib

    root = Path(__file__).resolve().parents[1]
    extras = tomllib.loads((root / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    source = (root / "benchmarks" / "handwritten.py").read_text()
    compared = set(re.findall(r'installed\("(\w+)"\)', source)) | set(re.findall(r'"(\w+)"\),\n', source))
    assert {"matplotlib", "tqdm", "rich"} <= compared
    assert compared <= {re.split(r"[<>=\[]", spec)[0] for spec in extras["bench"]}
    assert "'.[dev,bench]'" in (root / "docs" / "guide" / "cost.md").read_text()
