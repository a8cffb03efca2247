"""A sweep's training jobs pooled at its end: one group per variant, every job's seeds in it."""

import json

import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from attnlab import train
from attnlab.training.sweep_table import write_sweep_training
from tests.training._tiny import TINY_OVERRIDES


def test_the_jobs_seeds_are_pooled_per_variant(tmp_path):
    for seed in (1, 2):
        train("unscaled", "induction", seed=seed, overrides=[*TINY_OVERRIDES, "log.tensorboard=false"],
              out_dir=tmp_path / f"{seed - 1}-seed={seed}")
    text = write_sweep_training(tmp_path, bands=True)
    assert text.startswith("## unscaled (2 seeds)") and "clear of seed noise" in text
    band = EventAccumulator(str(tmp_path / "tensorboard" / "pooled"))
    band.Reload()
    losses = [json.loads((tmp_path / f"{s - 1}-seed={s}" / "training.json").read_text())["seeds"][0]["reference"]["losses"]
              for s in (1, 2)]
    assert [e.value for e in band.Scalars("induction/reference/train/loss/mean")] == pytest.approx([sum(v) / 2 for v in zip(*losses)], rel=1e-5)
