"""A sweep's folder: one sweep writes it at a time, and a sweep run again into it resumes.

The lock is an flock on a file in the folder, so a sweep that died (kill -9, a node lost) never
leaves it held; the file keeps the holder's description for the error a second sweep prints.
A folder whose multirun.yaml names other overrides and that holds records belongs to another
sweep: refused. One whose multirun.yaml is empty or cut short is this sweep's when each of its job
folders with a result is one of this sweep's jobs (by its own `.hydra/overrides.yaml`). The same overrides again: the jobs that are done (ok records and the completion
mark written after all of their outputs) are skipped (a sweep cut short is resumed this way). A job is matched to its folder by the overrides Hydra writes into
`.hydra/overrides.yaml`, not by the folder's name.

Only the standard library, Hydra and OmegaConf at import: Hydra imports every plugin in every app.
"""

from __future__ import annotations

import fcntl
import json
import os
import socket
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import IO

from hydra.errors import HydraException
from omegaconf import DictConfig, OmegaConf

LOCK_FILE = ".attnlab-sweep.lock"
RECORD_FILE = "record.json"
TRAINING_FILE = "training.json"  # a training job's result, written only when it finished (attnlab.training)
CHECKPOINT_FOLDER = ".attnlab-checkpoint"  # a training job's checkpoint, removed after its outputs (attnlab.training.checkpoint)


class SweepFolderError(HydraException):
    """A sweep refused because of its folder: one line, exit code 2."""


@contextmanager
def locked(folder: Path, command: str) -> Iterator[None]:
    """Hold the folder's lock for the duration; a second holder gets a one-line error naming us."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
        handle: IO[str] = open(folder / LOCK_FILE, "a+", encoding="utf-8")
    except OSError as exc:
        raise _cannot_write(folder, exc) from None
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.seek(0)
        holder = handle.read().strip() or "another process"
        handle.close()
        raise SweepFolderError(f"hydra.sweep.dir={folder}: another sweep is writing it ({holder}); "
                               "wait for it to end or choose another folder") from None
    except OSError:  # a file system without locks: the sweep runs unguarded, as before there was one
        handle.close()
        yield
        return
    try:
        handle.seek(0)
        handle.truncate()
        handle.write(f"pid {os.getpid()} on {socket.gethostname()} since {time.strftime('%H:%M:%S')}: {command}\n")
        handle.flush()
    except OSError as exc:  # a full disk: the resume's first write
        with suppress(OSError):  # the close flushes the note again
            handle.close()
        raise _cannot_write(folder, exc) from None
    try:
        yield
    finally:
        # the file stays: removing it would let a sweep waiting on its old inode lock a file no one sees
        handle.truncate(0)
        fcntl.flock(handle, fcntl.LOCK_UN)
        handle.close()


def _cannot_write(folder: Path, exc: OSError) -> OSError:
    """The lock's failed write as one line naming the folder and the cause."""
    from attnlab.record.files import WriteError  # here, not at the top: see the module's docstring

    return WriteError(exc.errno, f"{folder}: cannot write {LOCK_FILE}: {exc.strerror or exc}")


def write_multirun_yaml(folder: Path, config: DictConfig) -> None:
    """The sweep's config, written atomically: a cut file made the folder another sweep's for good."""
    from attnlab.record import write_atomic  # here, not at the top: see the module's docstring

    write_atomic(folder / "multirun.yaml", OmegaConf.to_yaml(config))


UNREADABLE = "(an unreadable multirun.yaml)"


def previous_overrides(folder: Path, keys: Sequence[str] = ()) -> list[str] | None:
    """The overrides of the sweep that last wrote `folder` (its multirun.yaml); None if none did;
    [UNREADABLE] when the file is empty or cut short (a crash while it was written, before it was
    written atomically): not YAML, not ending its last line, or without one of the config's
    top-level `keys`."""
    path = folder / "multirun.yaml"
    if not path.is_file():
        return None
    try:
        text = path.read_text(encoding="utf-8")
        saved = OmegaConf.create(text) if text.endswith("\n") else None
        if not isinstance(saved, DictConfig) or not set(keys) <= set(saved):
            return [UNREADABLE]
        return [str(line) for line in saved.hydra.overrides.task]
    except Exception:  # noqa: BLE001 - an unreadable one says nothing of whose folder it is
        return [UNREADABLE]


def jobs_on_disk(folder: Path) -> set[tuple[str, ...]]:
    """The overrides (`.hydra/overrides.yaml`) of every job folder under `folder` with a result."""
    found = set()
    for overrides_file in folder.rglob(".hydra/overrides.yaml"):
        job_dir = overrides_file.parent.parent
        if any(job_dir.rglob(RECORD_FILE)) or (job_dir / TRAINING_FILE).exists():
            with suppress(Exception):
                found.add(tuple(str(line) for line in OmegaConf.load(overrides_file)))
    return found


def job_outcomes(folder: Path, unfinished: dict[tuple[str, ...], str] | None = None) -> dict[tuple[str, ...], bool]:
    """{a job's overrides: whether it is done} for every job folder under `folder` with at least
    one record: done when every record is ok, there are as many as its seeds (n_seeds), and its
    completion mark (attnlab.record.completion, written after every output) names these
    overrides and these very record files. `unfinished` gets {overrides: why not} of the others."""
    from attnlab.record.completion import done_mark  # here, not at the top: only a resumed sweep reads records

    outcomes: dict[tuple[str, ...], bool] = {}
    for overrides_file in folder.rglob(".hydra/overrides.yaml"):
        job_dir = overrides_file.parent.parent
        statuses = [_status(path) for path in job_dir.rglob(RECORD_FILE)]
        training = not statuses and (job_dir / TRAINING_FILE).exists()  # a training job's result (attnlab.training)
        if training:
            statuses = [("ok", 1)]
        if not statuses:
            continue
        try:
            overrides = tuple(str(line) for line in OmegaConf.load(overrides_file))
        except Exception:  # noqa: BLE001 - a job folder we cannot read is a job to run again
            continue
        ok = all(status == "ok" for status, _ in statuses) and len(statuses) >= max(n for _, n in statuses)
        why = (_training_done(job_dir) if training else done_mark(job_dir, overrides)) if ok else None
        if why is not None and unfinished is not None:
            unfinished[overrides] = f"{job_dir.name}: {why}"
        outcomes[overrides] = ok and why is None and outcomes.get(overrides, True)
    return outcomes


def _training_done(job_dir: Path) -> str | None:
    """None when a training job wrote every output: its checkpoint is removed last."""
    if (job_dir / CHECKPOINT_FOLDER).exists():
        return "its outputs were not all written (its checkpoint resumes it)"
    return None


def _status(path: Path) -> tuple[str, int]:
    """(status, n_seeds) of a record file; ("unreadable", 1) when it is not a record."""
    from attnlab.record import check_record_data  # here, not at the top: only a resumed sweep reads records

    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        check_record_data(data)  # a record that does not validate (a NaN seed, a field missing) is run again
        n_seeds = data.get("config", {}).get("n_seeds", 1)
        return str(data["status"]), n_seeds if isinstance(n_seeds, int) and n_seeds >= 1 else 1
    except Exception:  # noqa: BLE001 - any file that is not a record
        return "unreadable", 1


def check_reuse(folder: Path, overrides: Sequence[str], jobs: Sequence[Sequence[str]] = (),
                keys: Sequence[str] = ()) -> str | bool:
    """Whether this sweep (its `overrides`, `jobs` and config's top-level `keys`) resumes the one
    that wrote `folder`: True, or, when its multirun.yaml is unreadable and every job folder with a
    result is one of `jobs` (their own `.hydra/overrides.yaml` say so), the line saying so. Raises
    when the folder holds another sweep's results."""
    before = previous_overrides(folder, keys)
    if before is None:
        return False
    if before == list(overrides):
        return True
    found = jobs_on_disk(folder)
    if not found:
        return False
    if before == [UNREADABLE] and found <= {tuple(job) for job in jobs}:
        return (f"{folder}/multirun.yaml is empty or cut short; its {len(found)} job folder(s) with results are "
                f"this sweep's (their .hydra/overrides.yaml): resuming, multirun.yaml written again")
    raise SweepFolderError(f"hydra.sweep.dir={folder}: holds the records of another sweep ({' '.join(before)}); "
                           "choose a new folder, or run that sweep's command again to resume it")


def runs_of(indices: Sequence[int]) -> list[tuple[int, int]]:
    """[(first, end)] of the consecutive runs in sorted `indices`: each launched with its own numbers."""
    runs: list[tuple[int, int]] = []
    for index in indices:
        if runs and runs[-1][1] == index:
            runs[-1] = (runs[-1][0], index + 1)
        else:
            runs.append((index, index + 1))
    return runs
