"""A training job's checkpoint, so that a killed or preempted job resumes where it was and ends
with the results an uninterrupted run has (same seed, same batches: bitwise on CPU).

Every `training.checkpoint_every` steps, and after the step a SIGTERM arrives in, the job writes
what it has: the finished seeds' results, the current seed's finished side, both models'
parameters, the training side's optimizer, scheduler and batch generator, and the torch, NumPy
and Python random states. Never pickle: the tensors go into a safetensors file, everything else
into `checkpoint.json`, which names that file (`attnlab.training.tensor_json`). Both are written
under temporary names and renamed, the tensors first under a name of their own and the index
last, so a kill at any moment leaves the previous checkpoint or the new one, never half of one.
A checkpoint is kept with a key of what decides the results (variant, settings, seeds, device,
classes): another job's is not resumed.
"""

from __future__ import annotations

import hashlib
import json
import random
import signal
import sys
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors.torch import load as load_tensors
from safetensors.torch import save as save_tensors
from torch import nn

from attnlab.record.files import write_atomic
from attnlab.training.signals import submitit_signal
from attnlab.training.tensor_json import decoded, encoded

FOLDER = ".attnlab-checkpoint"  # inside the job's folder
INDEX = "checkpoint.json"
FORMAT = 1


def checkpoint_key(decides: dict[str, Any]) -> str:
    text = json.dumps(decides, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def random_states() -> dict[str, Any]:
    return {"torch": torch.get_rng_state(), "numpy": np.random.get_state(), "python": random.getstate()}


def set_random_states(states: dict[str, Any]) -> None:
    torch.set_rng_state(states["torch"])
    np.random.set_state(states["numpy"])
    random.setstate(states["python"])


class Stop:
    """A SIGTERM (a scheduler's time limit or preemption, `kill`), or submitit's preemption signal
    where submitit handles it, noted while a job trains: the loop ends its step, writes a
    checkpoint, then the signal goes on to the handler it found (submitit's calls the launcher's
    `checkpoint` hook, which requeues the job)."""

    def __init__(self) -> None:
        self.requested: int | None = None  # the signal noted
        self.previous: dict[int, Any] = {}
        self.frame: Any = None

    def __call__(self, signum: int, frame: Any) -> None:
        self.requested, self.frame = signum, frame

    def pass_on(self) -> None:
        """The signal noted, to the handler in force before training: the command's (SIGTERM as
        Ctrl-C), submitit's, or the default's (the process ends)."""
        signum, self.requested = self.requested, None
        if signum is None:
            return
        previous = self.previous.get(signum, signal.SIG_DFL)
        if callable(previous):
            previous(signum, self.frame)
        elif previous in (None, signal.SIG_DFL):
            self.restore()
            signal.raise_signal(signum)

    def restore(self) -> None:
        for signum, previous in self.previous.items():
            signal.signal(signum, previous if previous is not None else signal.SIG_DFL)
        self.previous = {}


@contextmanager
def stop_on_sigterm() -> Iterator[Stop]:
    """SIGTERM (and submitit's signal, in its jobs) noted for the block, in the main thread only
    (elsewhere no handler can be set); one noted after the last checkpoint is passed on when the
    block ends."""
    stop = Stop()
    if threading.current_thread() is not threading.main_thread():
        yield stop
        return
    for signum in {s for s in (signal.SIGTERM, submitit_signal()) if s is not None}:
        stop.previous[signum] = signal.signal(signum, stop)
    try:
        yield stop
        stop.pass_on()
    finally:
        stop.restore()


class Checkpoints:
    """The job's checkpoint folder (None: nothing is written, as for `attnlab.train` without out_dir)."""

    def __init__(self, folder: Path | None, key: str, every: int, stop: Stop | None = None) -> None:
        self.folder, self.key, self.every = folder, key, every
        self.stop = stop or Stop()
        self.generation = 0
        self.resumed = self._read()  # what the job resumes from, or None

    def _read(self) -> dict[str, Any] | None:
        index = None if self.folder is None else self.folder / INDEX
        if index is None or not index.exists():
            return None
        try:
            meta = json.loads(index.read_text(encoding="utf-8"))
            data = (self.folder / meta["tensors"]).read_bytes()
            if hashlib.sha256(data).hexdigest() != meta["sha256"]:
                raise ValueError("its tensors are not the ones it names")
            tensors = load_tensors(data)
        except (OSError, ValueError, KeyError, TypeError) as exc:
            print(f"attnlab: warning: {self.folder}: the checkpoint cannot be read ({exc}); training from the "
                  f"start", file=sys.stderr)
            return None
        self.generation = meta["generation"]
        if meta.get("format") != FORMAT or meta.get("key") != self.key:
            print(f"attnlab: warning: {self.folder}: the checkpoint is of another job (its variant, settings or "
                  f"seeds differ); training from the start", file=sys.stderr)
            return None
        state: dict[str, Any] = decoded(meta["state"], tensors)
        return state

    def due(self, step: int) -> bool:
        """A SIGTERM noted (passed on after the save, even with nowhere to write), or the cadence's step."""
        return self.stop.requested is not None or (self.folder is not None and bool(self.every) and step % self.every == 0)

    def save(self, state: dict[str, Any]) -> None:
        """`state` (JSON values, tensors and arrays anywhere in it) and the random states written
        atomically; a SIGTERM that asked for it is passed on after."""
        if self.folder is not None:
            self.generation += 1
            plain, tensors = encoded({**state, "random": random_states()})
            name = f"tensors-{self.generation}.safetensors"
            data = save_tensors(tensors)
            write_atomic(self.folder / name, data, durable=True)
            meta = {"format": FORMAT, "key": self.key, "generation": self.generation, "tensors": name,
                    "sha256": hashlib.sha256(data).hexdigest(), "state": plain}
            write_atomic(self.folder / INDEX, json.dumps(meta), durable=True)  # last: it names the tensors
            for old in self.folder.glob("tensors-*.safetensors"):
                if old.name != name:
                    old.unlink(missing_ok=True)
        self.stop.pass_on()



def remove(folder: Path | None) -> None:
    """The job's outputs are written: its checkpoint has served."""
    if folder is None or not folder.exists():
        return
    (folder / INDEX).unlink(missing_ok=True)  # first: no index, no checkpoint
    for path in folder.iterdir():
        path.unlink(missing_ok=True)
    folder.rmdir()


class SeedProgress:
    """One seed's place in the job's checkpoint: the seeds done before it, its finished sides, both
    models (set to the checkpoint's parameters when it resumes this seed) and the side in training."""

    def __init__(self, checkpoints: Checkpoints, done: list[dict[str, Any]], seed: int,
                 models: Mapping[str, nn.Module]) -> None:
        self.checkpoints, self.done, self.seed, self.models = checkpoints, done, seed, models
        resumed = checkpoints.resumed or {}
        current = resumed.get("current")
        self.resumed = current if current is not None and current["seed"] == seed else None
        self.sides: dict[str, dict[str, Any]] = {}
        if self.resumed is not None:
            self.sides = dict(self.resumed["sides"])
            for side, model in models.items():
                model.load_state_dict(self.resumed["models"][side], strict=True)
            set_random_states(resumed["random"])
            training = self.resumed["training"]
            where = f"{training['side']} at step {training['step']}" if training else "its start"
            print(f"attnlab: resuming training from the checkpoint in {checkpoints.folder}: seed {seed}, {where}",
                  file=sys.stderr)

    def finished(self, side: str) -> dict[str, Any] | None:
        return self.sides.get(side)

    def side_done(self, side: str, result: dict[str, Any]) -> None:
        self.sides[side] = result

    def saving(self, side: str) -> SideSaving:
        training = None if self.resumed is None else self.resumed["training"]
        return SideSaving(self, side, training if training is not None and training["side"] == side else None)

    def save(self, training: dict[str, Any] | None) -> None:
        self.checkpoints.save({"seeds": self.done, "current": {
            "seed": self.seed, "sides": self.sides, "training": training,
            "models": {side: model.state_dict() for side, model in self.models.items()}}})


class SideSaving:
    """The training loop's `Saving` (attnlab.training.loop) for one side of a seed: `resume` holds
    the loop's state and the side's evaluations so far."""

    def __init__(self, progress: SeedProgress, side: str, resume: dict[str, Any] | None) -> None:
        self.progress, self.side, self.resume = progress, side, resume
        self.evals: list[dict[str, Any]] = [] if resume is None else list(resume["evals"])
        self.probes: dict[str, Any] = {} if resume is None else dict(resume.get("probes") or {})  # HeadProbes.recorded()

    def due(self, step: int) -> bool:
        return self.progress.checkpoints.due(step)

    def save(self, state: dict[str, Any]) -> None:
        self.progress.save({"side": self.side, **state, "evals": self.evals, "probes": self.probes})


def finished_seeds(checkpoints: Checkpoints) -> list[dict[str, Any]]:
    return list((checkpoints.resumed or {}).get("seeds", []))


def seed_done(checkpoints: Checkpoints, done: list[dict[str, Any]]) -> None:
    """Every seed in `done` finished: the checkpoint holds their results and nothing in training."""
    checkpoints.save({"seeds": done, "current": None})
