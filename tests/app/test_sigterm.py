"""Issue 43 (2): SIGTERM (a scheduler's time limit) ends a sweep as Ctrl-C does: the finished jobs'
records kept, the table refreshed from disk, exit code 143, resumable; and a table refresh skipped
by the rate limit is made before the next job starts, so a long job never leaves the table behind."""

from __future__ import annotations

import csv
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

SLOW = '''
import time
from pathlib import Path

import torch
import torch.nn as nn


class Slow(nn.Module):
    """Sleeps in its first run (it writes `started`), returns at once in the next."""

    def __init__(self, d_in, d_out):
        super().__init__()
        self.W_value = nn.Parameter(torch.rand(d_in, d_out))

    def forward(self, x):
        started = Path("started")
        if not started.exists():
            started.write_text("yes")
            time.sleep(300)
        return x @ self.W_value
'''
SWEEP = ["-m", "variant=unscaled,reference,linear,slow", "log.terminal=false", "log.tensorboard=false",
         "log.html=false", "hydra.sweep.dir=sweep"]


def table_variants(path: Path) -> list[str]:
    with path.open(newline="") as handle:
        return sorted(row["variant"] for row in csv.DictReader(handle))


@pytest.mark.slow
def test_sigterm_keeps_the_records_refreshes_the_table_and_the_sweep_resumes(tmp_path) -> None:
    (tmp_path / "plugins").mkdir()
    (tmp_path / "plugins" / "slow.py").write_text(SLOW)
    env = {k: v for k, v in os.environ.items() if k != "HYDRA_FULL_ERROR"}
    command = [sys.executable, "-m", "attnlab", *SWEEP]
    sweep = subprocess.Popen(command, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 240
        while not (tmp_path / "started").exists() and time.monotonic() < deadline:
            time.sleep(0.2)
        table = tmp_path / "sweep" / "comparison.csv"
        assert table_variants(table) == ["linear", "reference", "unscaled"]  # the trailing refresh: all three before the long job
        sweep.send_signal(signal.SIGTERM)
        _, stderr = sweep.communicate(timeout=60)
    finally:
        sweep.kill()
    assert sweep.returncode == 143, stderr
    assert stderr.splitlines()[-1].startswith("attnlab: terminated (SIGTERM); finished jobs' records are kept")
    assert "Traceback" not in stderr
    assert table_variants(table) == ["linear", "reference", "unscaled"]
    resumed = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert resumed.returncode == 0, resumed.stderr
    assert "3 of 4 job(s) are done; running the other 1" in resumed.stderr
    assert table_variants(table) == ["linear", "reference", "slow", "unscaled"]
