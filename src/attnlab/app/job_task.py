"""The Hydra task's body: one job, handed to the guard its run calls for (attnlab.app.isolation).

Light on purpose: a launcher's process (a joblib worker) runs this and hands a sweep's job to a
job worker, which runs the job's code (attnlab.app.run_job) with torch and the plugins its
forkserver imported; the launcher's process never imports them itself.
"""

from __future__ import annotations

from functools import partial
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from attnlab.app.config_values import check_key
from attnlab.app.isolation import run_job_guarded
from attnlab.app.lifeline import end_with_command
from attnlab.sinks.base import JobInfo

CHECKED_FIRST = "check_first"  # hydra.callbacks' key of attnlab.app.check_first.CheckFirst (conf/config.yaml)


def run_task(cfg: DictConfig, hydra_cfg: DictConfig) -> list[str]:
    """The Hydra task: one job; returns the paths of the records that failed.

    A sweep's job (and a run with timeout_s) runs in a process of its own, a single run in this
    one, guarded (attnlab.app.isolation): what a module does to its process fails its own record.
    A sweep run by attnlab's sweeper checked every job's values already: not again here.
    """
    end_with_command()  # in a launcher's worker (joblib, submitit): it dies with the command
    multirun = hydra_cfg.mode.name == "MULTIRUN"
    job = JobInfo(
        dir=Path(hydra_cfg.runtime.output_dir),
        sweep_dir=Path(str(hydra_cfg.sweep.dir)) if multirun else None,
        num=hydra_cfg.job.get("num") if multirun else None,
        overrides=tuple(hydra_cfg.overrides.task),
    )
    # checked already: a sweep's values by attnlab's sweeper, a single run's request before Hydra wrote its folder
    checked = (bool(OmegaConf.select(hydra_cfg, "sweeper.check_job")) if multirun
               else CHECKED_FIRST in (OmegaConf.select(hydra_cfg, "callbacks") or {}))
    check_key(cfg, "timeout_s")  # before it isolates the job: timeout_s=0 would fail it unrun
    work = partial(job_work, cfg, job, multirun=multirun, checked=checked)
    fail = partial(write_failure_line, cfg, job.dir)
    return run_job_guarded(work, fail, cfg, isolate=multirun or cfg.timeout_s is not None)


def job_work(cfg: DictConfig, job: JobInfo, *, multirun: bool, checked: bool) -> list[str]:
    """attnlab.app.run_job.job_work, imported where the job runs (a job worker has it imported)."""
    from attnlab.app import run_job

    return run_job.job_work(cfg, job, multirun=multirun, checked=checked)


def write_failure_line(cfg: DictConfig, job_dir: Path, cause: str) -> str:
    """attnlab.app.run_job.write_failure_line, imported only when a job's process died or timed out."""
    from attnlab.app import run_job

    return run_job.write_failure_line(cfg, job_dir, cause)
