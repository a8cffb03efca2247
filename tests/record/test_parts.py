"""A record is built once, by `record_of`, from the values its steps returned."""

from __future__ import annotations

from dataclasses import fields

import numpy as np
import pytest

from attnlab.record import Diagnosis, Effect, Finding, ModelInfo, Pair, Record, Setup, record_of


def test_each_part_is_named_as_the_record_names_it():
    record_fields = {f.name for f in fields(Record)}
    for part in (Setup, Pair, Diagnosis):
        assert {f.name for f in fields(part)} <= record_fields, part


def diagnosis(**changed) -> Diagnosis:
    weights = np.full((3, 3), 1 / 3, dtype=np.float32)  # (query, key)
    values = dict.fromkeys(f.name for f in fields(Diagnosis))
    values.update(stages={"weights": weights}, stage_shapes={"weights": [3, 3]},
                  canonical_shapes={"weights": [1, 1, 3, 3]}, reference_stages={}, reference_stage_shapes={},
                  reference_canonical_shapes={}, expected_shapes={}, missing_stages=[], reconstructed_stages=[],
                  output_is_context=False, returned="Tensor (3, 2)", diagnostics={"divergence_weights": 0.5},
                  head_diagnostics={}, reference_diagnostics={}, findings=[Finding("scaling", "scores", "error", "x")],
                  not_checked=[], predictions=[], **changed)
    return Diagnosis(**values)


SETUP = Setup(variant="unscaled", seed=3, config={"seed": 3}, labels=["a", "b", "c"], n_tokens=3, d_in=3, d_out=2)


def test_a_failed_record_keeps_what_the_steps_before_the_failure_found():
    pair = Pair(reference="multi_head_attention", weights_loaded={"W_query": "copied"})
    record = record_of(SETUP, pair, error="variant 'unscaled' raised ValueError: no")
    assert (record.status, record.error) == ("failed", "variant 'unscaled' raised ValueError: no")
    assert record.reference == "multi_head_attention" and record.weights_loaded == {"W_query": "copied"}
    assert (record.variant, record.seed, record.labels, record.d_out) == ("unscaled", 3, ["a", "b", "c"], 2)
    assert record.stages == {} and record.diagnostics == {} and record.findings == []


def test_a_diagnosed_record_holds_the_diagnosis_and_its_profile_as_diagnostics():
    record = record_of(SETUP, Pair(reference="reference"), diagnosis(), profile={"time_ratio": 2.0})
    assert record.ok and record.error is None
    assert record.canonical("weights").shape == (1, 1, 3, 3) and record.findings[0].code == "scaling"
    assert record.diagnostics == {"divergence_weights": 0.5, "time_ratio": 2.0}
    assert record.profile == {"time_ratio": 2.0}


EFFECT = Effect(kl_mean=0.5, kl_max=1.0, kl_clamped=0.0, top1_agreement=0.75, loss=2.0, loss_changed=2.5,
                hidden_divergence=0.1, hidden_relative_divergence=0.01, non_finite_positions=0)


@pytest.mark.parametrize("key", ["effect", "end_to_end"])
def test_a_model_runs_effect_is_in_its_model_and_its_diagnostics(key):
    """The variant's effect in a layer's place (`effect`); the learner's check's, both models whole (`end_to_end`)."""
    about = ModelInfo(model="gpt2", n_layers=2, parameters=10, tokenizer="gpt2", heads=2, kv_heads=2, layer=1,
                      attention="h.1.attn", end_to_end=EFFECT if key == "end_to_end" else None)
    setup = Setup(variant="unscaled", seed=0, config={}, model=about)
    record = record_of(setup, Pair(), diagnosis(), effect=EFFECT if key == "effect" else None)
    assert getattr(record.model, key) == EFFECT and record.model.layer == 1
    assert record.diagnostics[f"{key}_kl_mean"] == 0.5 and record.diagnostics["divergence_weights"] == 0.5
    failed = record_of(setup, Pair(), error="the model raised")
    assert failed.model.effect is None and failed.diagnostics == {}
