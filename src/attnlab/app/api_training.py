"""`attnlab.train(...)`: a training job from Python, its config composed as the command line's."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

from torch import nn

from attnlab.app.api import prepared
from attnlab.app.job_settings import sink_settings, training_request
from attnlab.app.run_job import training_outputs
from attnlab.sinks.base import JobInfo, build_sinks
from attnlab.training.config_job import training_job
from attnlab.training.job import TrainingResult


def train(variant: str | type[nn.Module] | nn.Module, training: str = "induction", seed: int = 123,
          n_seeds: int = 1, overrides: Iterable[str] = (), out_dir: str | Path | None = None,
          **kwargs: Any) -> TrainingResult:
    """`attnlab.train("unscaled", "induction", n_seeds=3, overrides=["training.steps=100"])`: the
    reference and the variant (a name, or a class of yours in memory) trained from one start;
    files (training.json, the enabled outputs) written only with `out_dir`; nothing printed unless
    log={"terminal": True}. The result's `.verdict`, `.table` (a DataFrame), `.rows`, `.seeds`; a notebook shows its page."""
    cfg, _ = prepared(variant, seed, overrides=[f"training={training}", f"n_seeds={n_seeds}", *overrides], **kwargs)
    job = None if out_dir is None else JobInfo(Path(out_dir))
    if job is not None:
        job.dir.mkdir(parents=True, exist_ok=True)
    return training_job(training_request(cfg), None if job is None else job.dir,
                        write=training_outputs(cfg, build_sinks(sink_settings(cfg)), job))


__all__ = ["train"]
