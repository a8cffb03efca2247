"""Sized at the text: a model whose context is long (Mixtral's default 131,072 positions) runs on an
8-token text; a model too large for memory, or of a kind attnlab has no whole-model path for, is
refused in one short line naming what to do."""

from __future__ import annotations

import pytest

from attnlab.compute.memory import available_bytes
from tests.model.test_loading import refused, run

EIGHT_TOKENS = "Every effort moves you forward, and every"
SMALL_MIXTRAL = ("model=hf:mixtral", "model.hidden_size=64", "model.num_attention_heads=4", "model.num_key_value_heads=2",
                 "model.num_hidden_layers=2", "model.intermediate_size=128")
DEFAULT_MIXTRAL_GIB = 174.5  # 46.85e9 parameters in float32 (a vocabulary of 50,257 rows)


def test_mixtral_at_its_default_context_runs_on_an_eight_token_text() -> None:
    result = run(*SMALL_MIXTRAL, f"inputs.text='{EIGHT_TOKENS}'")
    assert result.record.n_tokens == 8
    assert result.record.status != "failed", result.record.error
    assert result.record.config["model"].get("max_position_embeddings") is None  # the default context, unchanged
    effect = result.record.model.effect
    assert effect.kl_mean >= 0.0 and effect.kl_max >= 0.0


def test_the_default_mixtral_is_refused_with_its_weights_and_the_size_keys() -> None:
    limit, _ = available_bytes()
    if limit > DEFAULT_MIXTRAL_GIB * 2**30:
        pytest.skip(f"this machine has room for the default Mixtral's {DEFAULT_MIXTRAL_GIB} GiB of weights")
    message = refused("model=hf:mixtral", f"inputs.text='{EIGHT_TOKENS}'")
    assert len(message) <= 200 and "175.0 GiB" in message
    assert "model.hidden_size=" in message and "model.max_position_embeddings=" in message


@pytest.mark.parametrize("model_type,config", [("wav2vec2", "Wav2Vec2Config"), ("deit", "DeiTConfig"),
                                               ("clip_vision_model", "CLIPVisionConfig")])
def test_a_model_with_no_head_attnlab_runs_is_refused_in_one_short_line(model_type, config) -> None:
    message = refused(f"model=hf:{model_type}")
    assert len(message) <= 200 and config in message and f"variant=hf:{model_type}" in message
