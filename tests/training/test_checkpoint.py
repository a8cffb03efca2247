"""A training job's checkpoint: a job stopped anywhere resumes from it and ends with the results of
a run never stopped, bit for bit (CPU, one thread)."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from attnlab.errors import UserError
from attnlab.training import checkpoint
from attnlab.training.checkpoint import FOLDER, INDEX, Checkpoints
from attnlab.training.job import plan, run
from attnlab.training.tensor_json import decoded, encoded
from tests.training._tiny import TINY_OVERRIDES, tiny


def test_values_with_tensors_come_back_as_they_were() -> None:
    state = np.random.RandomState(5).get_state()  # a tuple holding a uint32 array
    value = {"tuple": (1, 2.5, None), "int_keys": {0: np.arange(6, dtype=np.float32).reshape(2, 3)},
             "tensor": torch.tensor([1.0, float("nan")]), "step": torch.tensor(3.0), "numpy_state": state,
             "float": 0.1 + 0.2, "bytes": torch.ByteTensor([0, 255])}
    plain, tensors = encoded(value)
    back = decoded(json.loads(json.dumps(plain)), tensors)
    assert back["tuple"] == (1, 2.5, None) and back["float"] == 0.30000000000000004
    assert list(back["int_keys"]) == [0] and back["int_keys"][0].dtype == np.float32
    assert np.array_equal(back["int_keys"][0], np.arange(6, dtype=np.float32).reshape(2, 3))
    assert torch.equal(back["tensor"][:1], torch.tensor([1.0])) and torch.isnan(back["tensor"][1])
    assert back["numpy_state"][0] == "MT19937" and back["numpy_state"][1].dtype == np.uint32
    assert np.array_equal(back["numpy_state"][1], state[1]) and back["numpy_state"][2:] == state[2:]
    assert back["bytes"].dtype == torch.uint8 and back["bytes"].tolist() == [0, 255]


class Killed(BaseException):
    """What the test raises right after the n-th checkpoint is written: the job stops there (as a signal
    would: no handler of the job's own catches it)."""


# in the first seed's reference, its variant, the second seed: each trains the job three times, so the
# fast tier keeps the first and the full suite all three
@pytest.mark.parametrize("kill_after", [3, pytest.param(9, marks=pytest.mark.slow), pytest.param(13, marks=pytest.mark.slow)])
def test_a_job_stopped_after_any_checkpoint_resumes_to_the_same_results(tmp_path, monkeypatch, kill_after) -> None:
    settings = tiny(steps=20, eval_every=10, checkpoint_every=4)  # per seed: 5 + 5 checkpoints, then the seed's
    whole = run(plan("unscaled", settings), "unscaled", [1, 2]).as_dict()

    save, saves = Checkpoints.save, []

    def save_then_die(self, state):
        save(self, state)
        saves.append(1)
        if len(saves) == kill_after:
            raise Killed()

    monkeypatch.setattr(Checkpoints, "save", save_then_die)
    with pytest.raises(Killed):
        run(plan("unscaled", settings), "unscaled", [1, 2], tmp_path / FOLDER)
    monkeypatch.setattr(Checkpoints, "save", save)
    resumed = run(plan("unscaled", settings), "unscaled", [1, 2], tmp_path / FOLDER).as_dict()
    assert json.dumps(resumed) == json.dumps(whole)


class Terminated(KeyboardInterrupt):
    """What the handler in force before training raises (the command's turns SIGTERM into Ctrl-C)."""


def test_a_sigterm_ends_the_step_writes_a_checkpoint_then_reaches_the_handler_found(tmp_path, monkeypatch) -> None:
    from attnlab.training import job

    settings = tiny(steps=20, eval_every=3, checkpoint_every=0)  # no checkpoint but the SIGTERM's
    whole = run(plan("unscaled", settings), "unscaled", [1]).as_dict()
    evaluate, calls = job.evaluate, []

    def evaluate_then_terminated(model, batch):
        calls.append(1)
        if len(calls) == 3:  # at step 6 of the reference
            os.kill(os.getpid(), signal.SIGTERM)
        return evaluate(model, batch)

    def found(signum, frame):
        raise Terminated()

    previous = signal.signal(signal.SIGTERM, found)
    try:
        monkeypatch.setattr(job, "evaluate", evaluate_then_terminated)
        with pytest.raises(Terminated):
            run(plan("unscaled", settings), "unscaled", [1], tmp_path / FOLDER)
        assert signal.getsignal(signal.SIGTERM) is found  # as it was found
        saved = json.loads((tmp_path / FOLDER / INDEX).read_text())["state"]["current"]["training"]
        assert (saved["side"], saved["step"]) == ("reference", 6)
        monkeypatch.setattr(job, "evaluate", evaluate)
        resumed = run(plan("unscaled", settings), "unscaled", [1], tmp_path / FOLDER).as_dict()
    finally:
        signal.signal(signal.SIGTERM, previous)
    assert json.dumps(resumed) == json.dumps(whole)


def test_a_checkpoint_of_other_settings_is_not_resumed(tmp_path, capsys) -> None:
    run(plan("unscaled", tiny(steps=4, checkpoint_every=2)), "unscaled", [1], tmp_path / FOLDER)
    result = run(plan("unscaled", tiny(steps=6, checkpoint_every=2)), "unscaled", [1], tmp_path / FOLDER)
    assert len(result.seeds[0]["variant"]["losses"]) == 6
    assert "the checkpoint is of another job" in capsys.readouterr().err
    assert json.loads((tmp_path / FOLDER / INDEX).read_text())["format"] == checkpoint.FORMAT
    assert not list((tmp_path / FOLDER).glob("*.pickle")) and not list((tmp_path / FOLDER).glob("*.pt"))


def test_checkpoint_every_is_checked() -> None:
    with pytest.raises(UserError, match=r"training.checkpoint_every=-1: must be an integer >= 0"):
        plan("unscaled", tiny(checkpoint_every=-1))


# The real command, killed with SIGKILL at random moments of its training and run again.

KILLED_RUN = [*TINY_OVERRIDES, "training=induction", "variant=unscaled", "n_seeds=2", "training.checkpoint_every=5",
              "log.table=true", "log.tensorboard=true", "log.terminal=false"]


def _start(folder: Path) -> subprocess.Popen:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    env.pop("HYDRA_FULL_ERROR", None)
    return subprocess.Popen([sys.executable, "-m", "attnlab", *KILLED_RUN, f"hydra.run.dir={folder}"],
                            cwd=folder.parent, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _generation(folder: Path) -> int:
    try:
        return json.loads((folder / FOLDER / INDEX).read_text())["generation"]
    except (OSError, ValueError, KeyError):
        return 0


def _scalars(folder: Path) -> dict[str, dict[str, list[tuple[int, float]]]]:
    found = {}
    for run_dir in sorted(p for p in (folder / "tensorboard").iterdir() if p.is_dir()):
        events = EventAccumulator(str(run_dir))
        events.Reload()
        found[run_dir.name] = {tag: [(e.step, e.value) for e in events.Scalars(tag)]
                               for tag in events.Tags()["scalars"]}
    return found


@pytest.fixture(scope="module")
def whole(tmp_path_factory) -> Path:
    """The run never stopped."""
    folder = tmp_path_factory.mktemp("uninterrupted") / "whole"
    uninterrupted = _start(folder)
    assert uninterrupted.wait(timeout=300) == 0, uninterrupted.stderr.read()
    return folder


def _same_results(folder: Path, whole: Path) -> None:
    for name in ("training.json", "training_comparison.md", "training_comparison.csv"):
        assert (folder / name).read_bytes() == (whole / name).read_bytes(), name
    assert _scalars(folder) == _scalars(whole)
    assert not (folder / FOLDER).exists()  # the outputs written, the checkpoint has served


@pytest.mark.slow
def test_a_job_killed_three_times_at_random_steps_resumes_to_an_uninterrupted_runs_results(tmp_path, whole) -> None:
    killed = tmp_path / "killed"
    chance = random.Random(int(time.time()))
    for _ in range(3):  # each time a few checkpoints past the last one, at a random moment of a step
        target = _generation(killed) + chance.randint(1, 8)
        process = _start(killed)
        while _generation(killed) < target and process.poll() is None:
            time.sleep(0.01)
        time.sleep(chance.uniform(0, 0.05))
        assert process.poll() is None, f"it ended before generation {target}: {process.stderr.read()}"
        process.send_signal(signal.SIGKILL)
        process.wait()
        process.stdout.close()
        process.stderr.close()
    resumed = _start(killed)
    assert resumed.wait(timeout=300) == 0, resumed.stderr.read()
    assert "attnlab: resuming training from the checkpoint" in resumed.stderr.read()
    _same_results(killed, whole)


@pytest.mark.slow
def test_a_job_terminated_writes_its_checkpoint_at_that_step_and_resumes(tmp_path, whole) -> None:
    stopped = tmp_path / "stopped"
    process = _start(stopped)
    while _generation(stopped) < 3 and process.poll() is None:
        time.sleep(0.01)
    sent_at = _generation(stopped)
    process.send_signal(signal.SIGTERM)
    assert process.wait(timeout=300) == 143
    assert "attnlab: terminated (SIGTERM)" in process.stderr.read()
    process.stdout.close()
    process.stderr.close()
    # One more, at the step the signal came in; none more when it came in while that step's checkpoint was
    # being written (the in-process test above checks the extra checkpoint deterministically).
    assert _generation(stopped) >= sent_at >= 3
    resumed = _start(stopped)
    assert resumed.wait(timeout=300) == 0, resumed.stderr.read()
    _same_results(stopped, whole)
