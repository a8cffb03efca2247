"""Issue 43 (7): a command started with stdout and stderr closed (`>&- 2>&-`, as some schedulers and
daemons run it) writes its records and exits with its usual code."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys

import pytest


def closed_streams(tmp_path, *args: str) -> int:
    command = " ".join(shlex.quote(a) for a in [sys.executable, "-m", "attnlab", *args])
    env = {k: v for k, v in os.environ.items() if k != "HYDRA_FULL_ERROR"}
    return subprocess.run(f"{command} >&- 2>&-", shell=True, cwd=tmp_path, env=env, timeout=300).returncode


def statuses(folder) -> list[str]:
    return sorted(json.loads(p.read_text())["status"] for p in folder.rglob("record.json"))


@pytest.mark.slow
def test_a_single_run_a_sweep_and_a_refusal_with_closed_output(tmp_path) -> None:
    assert closed_streams(tmp_path, "variant=unscaled", f"hydra.run.dir={tmp_path / 'run'}") == 0
    assert statuses(tmp_path / "run") == ["ok"]
    assert closed_streams(tmp_path, "-m", "variant=unscaled,reference", f"hydra.sweep.dir={tmp_path / 'sweep'}") == 0
    assert statuses(tmp_path / "sweep") == ["ok", "ok"]
    assert closed_streams(tmp_path, "variant=no_such_variant", f"hydra.run.dir={tmp_path / 'refused'}") == 2


@pytest.mark.slow
def test_a_reader_that_went_away_is_no_error(tmp_path) -> None:
    """`attnlab --help | head -1`: the reader closed the pipe before the help was written (here before
    anything was: its read end is closed from the start): exit 0, nothing said on stderr."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    env = {k: v for k, v in os.environ.items() if k != "HYDRA_FULL_ERROR"}
    try:
        done = subprocess.run([sys.executable, "-m", "attnlab", "--help"], stdout=write_end, stderr=subprocess.PIPE,
                              cwd=tmp_path, env=env, text=True, timeout=300)
    finally:
        os.close(write_end)
    assert (done.returncode, done.stderr) == (0, "")
