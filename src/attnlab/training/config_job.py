"""The training job as the command line, a sweep and `attnlab.train` run it: from the request the
app read from the config, checked, run, its outputs written by the caller's `write` (the sinks,
attnlab.sinks.training_files)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from attnlab.training import checkpoint, reference_cache
from attnlab.training.job import TrainingResult, plan, run
from attnlab.training.settings import TrainingRequest


def training_job(request: TrainingRequest, job_dir: Path | None, sweep_dir: Path | None = None,
                 write: Callable[[TrainingResult], None] | None = None) -> TrainingResult:
    """The CLI's and the sweep's training job: checked, run, `write` given its result; in a
    sweep, the trained references shared through `sweep_dir` (attnlab.training.reference_cache).
    A checkpoint in `job_dir` (attnlab.training.checkpoint) is resumed."""
    cache = None if sweep_dir is None else sweep_dir / reference_cache.FOLDER
    job = plan(request.variant, request.settings, request.device, cache)
    folder = None if job_dir is None else job_dir / checkpoint.FOLDER
    result = run(job, request.variant, request.seeds, folder)
    if write is not None:
        write(result)
    checkpoint.remove(folder)  # last: a job killed while writing its outputs resumes with every seed done
    return result


def check_training(request: TrainingRequest) -> None:
    """The training request checked without training (attnlab's sweeper checks every job first)."""
    plan(request.variant, request.settings, request.device)
