"""The config's own resolver: a single run's folder is never one another run already took."""

from __future__ import annotations

import datetime as dt
import subprocess
import sys
from concurrent.futures import ProcessPoolExecutor

import pytest

from attnlab.config import new_dir


def test_new_dir_takes_the_path_then_numbered_ones(tmp_path):
    path = str(tmp_path / "runs" / "13-16-01-unscaled")
    assert [new_dir(path) for _ in range(3)] == [path, path + "-2", path + "-3"]
    assert all((tmp_path / "runs" / name).is_dir() for name in ("13-16-01-unscaled", "13-16-01-unscaled-2"))


def test_racing_processes_each_get_their_own_folder(tmp_path):
    path = str(tmp_path / "same-second")
    with ProcessPoolExecutor(4) as pool:
        taken = list(pool.map(new_dir, [path] * 8))
    assert len(set(taken)) == 8


@pytest.mark.slow
def test_a_run_in_a_taken_second_keeps_the_other_runs_folder(tmp_path):
    """Every folder the run could be named for the next minute is taken: the run goes next to it."""
    now = dt.datetime.now()
    taken = [tmp_path / "runs" / f"{t:%Y-%m-%d}" / f"{t:%H-%M-%S}-unscaled"
             for t in (now + dt.timedelta(seconds=s) for s in range(60))]
    for folder in taken:
        folder.mkdir(parents=True)
        (folder / "record.json").write_text("{}")
    done = subprocess.run([sys.executable, "-m", "attnlab", "variant=unscaled", "log.tensorboard=false"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert all((folder / "record.json").read_text() == "{}" for folder in taken)
    (record,) = [p for p in (tmp_path / "runs").rglob("record.json") if p.read_text() != "{}"]
    assert record.parent.name.endswith("-unscaled-2")
