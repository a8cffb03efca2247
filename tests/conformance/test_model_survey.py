"""The whole-model survey: configs shrunk as their constructors derive them, its outcomes classified,
and a hashed sample of transformers' causal-LM types surveyed in-process."""

from __future__ import annotations

import hashlib

import pytest

from attnlab.conformance.model_survey import causal_lm_types, shrunk, survey_model

transformers = pytest.importorskip("transformers")


def small(model_type: str):
    return shrunk(transformers.AutoConfig.for_model(model_type))


def test_a_shrunk_config_derives_what_its_constructor_derives() -> None:
    deepseek = small("deepseek_v3")
    assert (deepseek.hidden_size, deepseek.num_attention_heads, deepseek.num_hidden_layers) == (64, 4, 2)
    assert deepseek.qk_head_dim == deepseek.qk_nope_head_dim + deepseek.qk_rope_head_dim  # not the default's 192
    assert deepseek.num_key_value_heads == 4  # as many as the heads, as in its default config
    assert small("mistral").num_key_value_heads == 2  # a group, as in its default config (8 of 32)


def test_a_hybrid_keeps_an_attention_layer_in_its_two() -> None:
    assert "full_attention" in small("qwen3_next").layer_types  # linear attention first, full attention every 4th
    jamba = small("jamba")  # attention every 8th layer from the 5th: the second of two
    assert [jamba.layers_block_type[i] for i in range(2)] == ["mamba", "attention"]


def test_a_model_transformers_cannot_run_is_not_attnlab_s() -> None:
    row = survey_model("deepseek_v2")  # its default config's num_experts_per_tok is None: its own forward fails
    assert row.outcome == "cannot_build" and "topk" in row.message


def test_a_model_without_attention_is_named_so() -> None:
    row = survey_model("mamba")
    assert row.outcome == "no_attention" and "no attention modules found" in row.message


# one in sixteen causal-LM types, chosen by a hash of its name (the same sample on every machine;
# the full list: python -m attnlab.zoo --models)
SAMPLE = [t for t in causal_lm_types() if hashlib.sha256(t.encode()).digest()[0] % 16 == 0]


@pytest.mark.slow
@pytest.mark.parametrize("model_type", SAMPLE)
def test_a_sampled_causal_lm_runs_its_default_variant_with_a_correct_copy(model_type) -> None:
    row = survey_model(model_type)
    if row.outcome in ("cannot_build", "no_attention"):  # transformers' own default fails, or nothing to compare
        return
    assert (row.outcome, row.message) == ("ok", "")
    assert row.errors == [] and row.kl is not None and row.kl < 1e-6
