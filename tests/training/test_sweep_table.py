"""A sweep's training jobs pooled at its end: one group per variant, every job's seeds in it."""

import json

import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from attnlab import train
from attnlab.sinks.table import TableSink
from attnlab.sinks.tensorboard import TensorBoardSink
from attnlab.training.sweep_table import pooled_sweep
from tests.training._tiny import TINY_OVERRIDES


def test_the_jobs_seeds_are_pooled_per_variant(tmp_path):
    for seed in (1, 2):
        train("unscaled", "induction", seed=seed, overrides=[*TINY_OVERRIDES, "log.tensorboard=false"],
              out_dir=tmp_path / f"{seed - 1}-seed={seed}")
    pooled = pooled_sweep(tmp_path)
    TableSink().write_training_sweep(pooled, tmp_path)
    TensorBoardSink().write_training_sweep(pooled, tmp_path)
    text = (tmp_path / "training_comparison.md").read_text()
    assert text == pooled.text and text.startswith("## unscaled (2 seeds)") and "clear of seed noise" in text
    assert (tmp_path / "training_comparison.csv").read_text().startswith("group,measure,what,")
    band = EventAccumulator(str(tmp_path / "tensorboard" / "pooled"))
    band.Reload()
    losses = [json.loads((tmp_path / f"{s - 1}-seed={s}" / "training.json").read_text())["seeds"][0]["reference"]["losses"]
              for s in (1, 2)]
    assert [e.value for e in band.Scalars("induction/reference/train/loss/mean")] == pytest.approx([sum(v) / 2 for v in zip(*losses)], rel=1e-5)


def test_groups_come_in_the_sweep_s_job_order(tmp_path):
    """Job 10 after job 2: why_sqrt_dk's ladder (unscaled 16, 32, 64) in its own order."""
    from attnlab.training.sweep_table import groups

    for job, width in ((2, 16), (10, 32), (11, 64)):
        folder = tmp_path / f"{job}-+experiment=why_sqrt_dk,training.model.d_model={width}"
        folder.mkdir()
        (folder / "training.json").write_text(json.dumps(
            {"variant": "unscaled", "settings": {"steps": 10, "model": {"d_model": width}}, "seeds": []}))
    assert list(groups(tmp_path)) == [f"unscaled training.model.d_model={w}" for w in (16, 32, 64)]
