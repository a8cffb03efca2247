"""The benchmark script runs: its quick mode prints a figure with its target (no timing asserted)."""

from __future__ import annotations

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
