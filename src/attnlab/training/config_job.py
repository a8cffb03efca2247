"""The training job as the command line, a sweep and `attnlab.train` run it: from the config,
checked, run, its outputs written."""

from __future__ import annotations

from pathlib import Path

from omegaconf import DictConfig

from attnlab.training.job import TrainingResult, plan, run
from attnlab.training.outputs import write_outputs
from attnlab.training.settings import settings_of


def training_job(cfg: DictConfig, job_dir: Path | None) -> TrainingResult:
    """The CLI's and the sweep's training job: checked, run, its files written into `job_dir`."""
    job = plan(cfg.variant.name, settings_of(cfg), cfg.device)
    result = run(job, cfg.variant.name, range(cfg.seed, cfg.seed + cfg.n_seeds))
    write_outputs(result, cfg, job_dir)
    return result


def check_training(cfg: DictConfig) -> None:
    """The training request checked without training (attnlab's sweeper checks every job first)."""
    plan(cfg.variant.name, settings_of(cfg), cfg.device)
