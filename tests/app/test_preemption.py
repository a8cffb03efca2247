"""A training job preempted under submitit (`hydra/launcher=submitit_local`): submitit's signal
(SIGUSR2, what its executors send before a time limit or at a preemption) makes the job write its
checkpoint and requeue itself through the launcher's checkpoint hook; the one command ends with
the results of a run never stopped."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from attnlab.training.checkpoint import FOLDER, INDEX
from tests.training._tiny import TINY_OVERRIDES

pytestmark = pytest.mark.slow

TRAINING = [*TINY_OVERRIDES, "training=induction", "variant=unscaled", "training.steps=150",
            "training.checkpoint_every=10", "log.tensorboard=false", "log.terminal=false"]


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "HYDRA_FULL_ERROR"}
    return {**env, "OMP_NUM_THREADS": "1"}


def _generation(folder: Path) -> int:
    for index in folder.rglob(f"{FOLDER}/{INDEX}"):
        try:
            return json.loads(index.read_text())["generation"]
        except (OSError, ValueError, KeyError):
            return 0
    return 0


def _submitit_tasks(sweep: Path) -> list[int]:
    """The pids of the processes submitit started for the sweep's jobs (`-m submitit.core._submit`)."""
    found = []
    for proc in Path("/proc").iterdir():
        try:
            argv = (proc / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"submitit.core._submit" in argv and any(str(sweep).encode() in a for a in argv):
            found.append(int(proc.name))
    return found


def test_a_training_job_preempted_under_submitit_requeues_itself_and_ends_as_an_uninterrupted_run(tmp_path):
    whole = subprocess.run([sys.executable, "-m", "attnlab", *TRAINING, f"hydra.run.dir={tmp_path / 'whole'}"],
                           cwd=tmp_path, env=_env(), capture_output=True, text=True, timeout=600)
    assert whole.returncode == 0, whole.stderr
    sweep = tmp_path / "sweep"
    command = subprocess.Popen([sys.executable, "-m", "attnlab", "-m", "hydra/launcher=submitit_local", *TRAINING,
                                f"hydra.sweep.dir={sweep}"], cwd=tmp_path, env=_env(), stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 300
    while _generation(sweep) < 2 and command.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    (task,) = _submitit_tasks(sweep)
    os.kill(task, signal.SIGUSR2)  # what submitit's executor sends when the job is preempted or about to time out
    out, err = command.communicate(timeout=600)
    assert command.returncode == 0, err
    (job,) = [p.parent for p in sweep.rglob("training.json")]
    assert (job / "training.json").read_bytes() == (tmp_path / "whole" / "training.json").read_bytes()
    logs = "".join(p.read_text() for p in (sweep / ".submitit").rglob("*_log.err"))
    assert "Caught signal SIGUSR2" in logs and "attnlab: resuming training from the checkpoint" in logs
    assert not (job / FOLDER).exists()
