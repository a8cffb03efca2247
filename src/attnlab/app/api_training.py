"""`attnlab.train(...)`: a training job from Python, its config composed as the command line's."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

from torch import nn

from attnlab.app.api import prepared
from attnlab.app.job_settings import training_request
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
    if out_dir is not None:
        Path(out_dir).mkdir(parents=True, exist_ok=True)
    return training_job(training_request(cfg), None if out_dir is None else Path(out_dir))


__all__ = ["train"]
