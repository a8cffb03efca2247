"""Issue 43 (3): kill -9 of a sweep's command ends every process it started (a launcher's workers,
forkservers, job workers) within seconds, mid-job, whatever the launcher."""

from __future__ import annotations

import importlib.util
import os
import signal
import subprocess
import sys
import time
from contextlib import suppress
from pathlib import Path

import pytest

from attnlab.app import lifeline
from tests.app.test_job_worker import alive, marked

SLEEPY = '''
import os
import time
from contextlib import suppress
from pathlib import Path

import torch.nn as nn


class Sleepy(nn.Module):
    """Notes that its forward started, then sleeps far past the test."""

    def __init__(self, d_in, d_out):
        super().__init__()

    def forward(self, x):
        Path("started", str(os.getpid())).write_text("")
        time.sleep(300)
'''
LAUNCHERS = {  # each runs both jobs at once (the basic launcher's job worker: tests/app/test_job_worker.py)
    "joblib": ["hydra/launcher=joblib", "hydra.launcher.n_jobs=2"],
    "submitit_local": ["hydra/launcher=submitit_local"],
}


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc").is_dir(), reason="finds the command's processes in /proc")
@pytest.mark.parametrize("launcher", list(LAUNCHERS))
def test_kill_9_of_the_command_ends_every_process_it_started(launcher, tmp_path) -> None:
    if launcher == "submitit_local" and importlib.util.find_spec("hydra_plugins.hydra_submitit_launcher") is None:
        pytest.skip("hydra-submitit-launcher is not installed")
    (tmp_path / "plugins").mkdir()
    (tmp_path / "plugins" / "sleepy.py").write_text(SLEEPY)
    (tmp_path / "started").mkdir()
    mark = f"attnlab-test-{os.getpid()}-{time.monotonic_ns()}"
    env = {**os.environ, "ATTNLAB_TEST_MARK": mark}
    command = subprocess.Popen([sys.executable, "-m", "attnlab", "-m", "variant=sleepy", "seed=1,2",
                                "log.terminal=false", "hydra.sweep.dir=sweep", *LAUNCHERS[launcher]],
                               cwd=tmp_path, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 120
        while len(list((tmp_path / "started").iterdir())) < 2 and time.monotonic() < deadline:
            assert command.poll() is None, "the sweep ended before its jobs started"
            time.sleep(0.1)
        jobs = [int(p.name) for p in (tmp_path / "started").iterdir()]
        assert len(jobs) == 2 and all(alive(pid) for pid in jobs)
        assert set(marked(mark)) - {command.pid}  # the processes the kill must end
        command.send_signal(signal.SIGKILL)
        command.wait()
        deadline = time.monotonic() + 5
        while (left := [pid for pid in marked(mark) if alive(pid)]) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert left == [], described(left)
    finally:
        for pid in marked(mark):  # nothing of a failed run left behind for the next tests
            with suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def described(pids: list[int]) -> list[str]:
    """Each process's pid, parent and command line: what was left running."""
    lines = []
    for pid in pids:
        with suppress(OSError):
            parent = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1]
            command = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            lines.append(f"{pid} (parent {parent}): {command[:150]}")
    return lines


def test_a_job_elsewhere_does_not_watch_the_command(monkeypatch) -> None:
    """A cluster's job gets the command's environment (Slurm exports it) but runs in another
    machine or allocation, where the command's pid names nothing: it must not end itself."""
    monkeypatch.setattr(lifeline, "_watching", None)
    monkeypatch.setenv(lifeline.COMMAND_ENV, f"{os.getppid()}:1@another machine")
    lifeline.end_with_command()
    assert lifeline._watching is None
    lifeline.mark_command()
    monkeypatch.setenv("SLURM_JOB_ID", "another allocation")
    lifeline.end_with_command()
    assert lifeline._watching is None


@pytest.mark.skipif(not Path("/proc").is_dir(), reason="reads /proc")
def test_a_process_whose_command_is_gone_ends() -> None:
    """Also when the command died before the process started watching."""
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    env = {**os.environ, lifeline.COMMAND_ENV: f"{gone.stdout.strip()}:1@{lifeline._place()}"}
    watching = "import time; from attnlab.app.lifeline import end_with_command; end_with_command(); time.sleep(30)"
    orphan = subprocess.run([sys.executable, "-c", watching], env=env, timeout=20)
    assert orphan.returncode == -signal.SIGKILL
