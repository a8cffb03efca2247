"""A sample of the survey in-process: one type of each kind, classified from what attnlab said."""

from __future__ import annotations

import pytest

import attnlab
from attnlab.conformance import survey
from attnlab.conformance.survey import refusal, survey_one

pytest.importorskip("transformers")


def test_a_library_class_that_runs_clean_is_ok() -> None:
    row = survey_one("llama")
    assert (row.cls, row.outcome, row.errors) == ("LlamaAttention", "ok", [])
    assert "rotary@queries" in row.info  # the RoPE it declares, as info
    assert row.defines_attention


def test_a_model_without_attention_is_its_own_outcome_outside_the_denominator() -> None:
    row = survey_one("resnet")  # a convolutional network: modeling_resnet defines no ...Attention
    assert row.outcome == "no_attention" and not row.defines_attention
    assert "ResNetModel builds no attention module" in row.message
    # ALIGN's module defines the text tower's attention, but its vision model (EfficientNet) builds none
    row = survey_one("align_vision_model")
    assert row.outcome == "no_attention" and not row.defines_attention


def test_a_model_building_an_attention_attnlab_does_not_run_stays_in_the_denominator() -> None:
    row = survey_one("chameleon_vqgan")  # its VQ-VAE builds a convolutional ChameleonVQVAEEncoderAttnBlock
    assert row.outcome == "refused" and row.defines_attention
    assert "ChameleonVQVAEEncoderAttnBlock" in row.message


def test_an_unknown_type_is_a_one_line_refusal() -> None:
    row = survey_one("no_such_type")
    assert row.outcome == "refused" and "knows no model type" in row.message


def test_a_python_exception_is_a_crash_named_by_its_type(monkeypatch: pytest.MonkeyPatch) -> None:
    def boom(*args: object, **kwargs: object) -> None:
        raise ZeroDivisionError("planted")

    monkeypatch.setattr(attnlab, "run", boom)
    row = survey_one("llama")
    assert (row.outcome, row.message) == ("crash", "ZeroDivisionError: planted")


def test_refusals_are_classified_by_attnlab_s_words() -> None:
    assert refusal("variant 'hf:bloom': forward needs 'residual', which attnlab cannot provide; ...") == "missing_input"
    assert refusal("variant 'hf:x' could not be built: TypeError: ...") == "cannot_build"
    assert refusal("variant=hf:x: no attention class: ...") == "no_attention_class"
    assert refusal("variant=hf:x: no attention class: XModel builds no attention module: a model without "
                   "attention") == "no_attention"
    assert refusal("something else") == "refused"
    assert survey.OUTCOMES[0] == "ok"
