"""The type checker passes on the packages pyproject's [tool.mypy] lists: a regression fails the suite."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_mypy_passes_on_the_listed_packages(tmp_path: Path) -> None:
    # a cache of its own: the run reads the source as it is, and leaves nothing in the repository
    result = subprocess.run([sys.executable, "-m", "mypy", "--cache-dir", str(tmp_path / "cache")],
                            cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, f"mypy found errors:\n{result.stdout}{result.stderr}"
    assert "Success" in result.stdout
