"""A refused command pointed at a finished run's folder (`hydra.run.dir`) leaves every file of it
as it was: the request is checked before Hydra writes `.hydra/`, through the real CLI."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.training._tiny import TINY_OVERRIDES

pytestmark = pytest.mark.slow


def attnlab(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "HYDRA_FULL_ERROR"}
    return subprocess.run([sys.executable, "-m", "attnlab", *args], cwd=cwd, env={**env, "OMP_NUM_THREADS": "1"},
                          capture_output=True, text=True, timeout=300)


def files(folder: Path) -> dict[str, tuple[bytes, int]]:
    return {str(p.relative_to(folder)): (p.read_bytes(), p.stat().st_mtime_ns) for p in folder.rglob("*") if p.is_file()}


@pytest.fixture(scope="module")
def finished(tmp_path_factory) -> Path:
    """A finished training run's folder."""
    here = tmp_path_factory.mktemp("finished")
    done = attnlab(here, "training=induction", "variant=unscaled", *TINY_OVERRIDES, "hydra.run.dir=run")
    assert done.returncode == 0, done.stderr
    assert (here / "run" / "training.json").exists() and (here / "run" / ".hydra" / "config.yaml").exists()
    return here / "run"


REFUSALS = [
    (["training=induction", "variant=unscaled", "training.steps=0"],
     "training.steps=0: must be a positive integer (1, 2, 3, ...)"),
    (["variant=reference", "batch=0"], "batch=0: must be a positive integer (1, 2, 3, ...)"),
    (["variant=reference", "timeout_s=0"], "timeout_s=0: must be a number of seconds in (0, inf] or null"),
]


@pytest.mark.parametrize("args,message", REFUSALS, ids=[a[-1] for a, _ in REFUSALS])
def test_a_refused_command_leaves_a_finished_runs_folder_byte_for_byte(finished, args, message) -> None:
    before = files(finished)
    done = attnlab(finished.parent, *args, f"hydra.run.dir={finished.name}")
    assert (done.returncode, done.stderr) == (2, f"attnlab: error: {message}\n")
    assert files(finished) == before
