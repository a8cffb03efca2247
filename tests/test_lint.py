"""The linter as CI runs it: ruff with the rules pyproject.toml names, over the package, the tests,
the benchmarks and the docs' scripts. A regression fails the suite with ruff's own lines."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_ruff_finds_nothing() -> None:
    ruff = shutil.which("ruff", path=str(Path(sys.executable).parent)) or shutil.which("ruff")
    if ruff is None:
        pytest.fail("ruff is not installed: pip install -c constraints.txt -e '.[dev]'")
    done = subprocess.run([ruff, "check", "src", "tests", "benchmarks", "docs"], cwd=ROOT, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
