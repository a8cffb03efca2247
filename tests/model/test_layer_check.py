"""The learner's check: the source's GPTModel (written in tests/model/learner.py from the source's
ch. 4, its attention the source's MultiHeadAttention verbatim) loaded with a Hugging Face GPT-2's
weights the source's ch. 5 way, against that GPT-2, layer by layer; each classic loading mistake
planted at one layer gives its finding at that layer and stage, and no other layer's."""

from __future__ import annotations

import pytest

import attnlab
from attnlab.model.head_patterns import HEAD_PATTERN_CODES
from tests.model.conftest import N_LAYER, TEXT, write_learner


def mismatches(result) -> list:
    """Findings about a difference between the two models (the heads' patterns describe the reference model)."""
    return [f for f in result.findings if f.code not in HEAD_PATTERN_CODES]

MISTAKES = [
    ({"order": "qvk", "at": 1}, 1, {("qkv_order", "keys"), ("qkv_order", "values")}),
    ({"order": "kqv", "at": 0}, 0, {("qkv_order", "queries"), ("qkv_order", "keys")}),
    ({"transpose": False, "at": 0}, 0, {("not_transposed", s) for s in ("queries", "keys", "values")}),
    ({"bias": False, "at": 1}, 1, {("bias_missing", s) for s in ("queries", "keys", "values")}),
]


def check(folder, hf_folder, monkeypatch) -> list:
    monkeypatch.chdir(folder)  # ./models/ is the working folder's
    return attnlab.run("reference", overrides=["model=gpt_model", "model.weights=learner.safetensors",
                                                f"reference_model.path={hf_folder}", "inputs=text",
                                                f"inputs.text='{TEXT}'", "log.tensorboard=false"])


def test_a_correct_load_matches_gpt2_at_every_layer_with_no_finding(tiny_gpt2, tmp_path, monkeypatch) -> None:
    results = check(write_learner(tmp_path, tiny_gpt2), tiny_gpt2, monkeypatch)
    assert [r.record.model.layer for r in results] == list(range(N_LAYER))
    for result in results:
        assert result.record.ok and mismatches(result) == [] and result.first_divergent_stage is None
        assert result.diagnostics["divergence_output"] < 1e-5
    end_to_end = results[0].record.model.end_to_end
    assert end_to_end.kl_max < 1e-6 and end_to_end.top1_agreement == 1.0


@pytest.mark.parametrize("mistake,layer,expected", MISTAKES, ids=[str(m[0]) for m in MISTAKES])
def test_each_loading_mistake_is_found_at_its_layer_and_stage(tiny_gpt2, tmp_path, monkeypatch, mistake, layer,
                                                              expected) -> None:
    results = check(write_learner(tmp_path, tiny_gpt2, **mistake), tiny_gpt2, monkeypatch)
    by_layer = {r.record.model.layer: r for r in results}
    codes = {"qkv_order", "not_transposed", "bias_missing"}
    found = {(f.code, f.stage) for f in by_layer[layer].findings if f.code in codes}
    assert found == expected
    assert by_layer[layer].first_divergent_stage in {stage for _, stage in expected}
    for other, result in by_layer.items():
        if other != layer:
            assert mismatches(result) == [] and result.first_divergent_stage is None  # the reference's input per layer
    assert results[0].record.model.end_to_end.kl_mean > 1e-6  # the whole model feels it


def test_a_loading_mistake_can_be_predicted(tiny_gpt2, tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(write_learner(tmp_path, tiny_gpt2, transpose=False, at=0))
    results = attnlab.run("reference", overrides=["model=gpt_model", "model.weights=learner.safetensors",
                                                   f"reference_model.path={tiny_gpt2}", "inputs=text",
                                                   f"inputs.text='{TEXT}'", "layer=0",
                                                   "expect.findings=[not_transposed,query_source]",
                                                   "log.tensorboard=false"])
    [prediction] = results.record.predictions
    assert prediction.name == "findings" and prediction.passed, prediction
