"""The training job through the real command line."""

import json

import pytest

from tests.training._tiny import TINY_OVERRIDES


@pytest.mark.slow
def test_training_from_the_command_line(app):
    run = app("training=induction", "variant=unscaled", "log.tensorboard=false", *TINY_OVERRIDES)
    assert run.returncode == 0, run.stderr
    assert "training induction: unscaled (MultiHeadAttention (mha_unscaled)" in run.stdout
    saved = json.loads((run.out_dir / "training.json").read_text())
    assert saved["classes"]["reference"].startswith("MultiHeadAttention") and saved["verdict"]
    assert not (run.out_dir / "record.json").exists()
