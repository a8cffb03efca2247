"""expect: validated up front, each prediction checked against the run."""

import pytest

from attnlab.errors import UserError
from attnlab.predictions import ALLOWED, check_predictions, validate_expectations
from tests._zoo_helpers import BOOK_INPUTS, run_pair


def _check(name, expect):
    v, _, d, first, findings = run_pair(name, BOOK_INPUTS, 2)
    return {p.name: p for p in check_predictions(expect, v, d, first, findings)}


def test_correct_predictions_on_the_reference_pass():
    expect = {"context_shape": [6, 2], "weights_shape": [6, 6], "row_sums": 1, "matches_reference": True,
              "first_divergent_stage": None, "findings": [], "softmax_dim": 1}
    predictions = _check("linear", expect)
    assert list(predictions) == list(expect)
    assert all(p.passed for p in predictions.values()), predictions
    assert predictions["context_shape"].observed == [6, 2]


def test_wrong_axis_breaks_row_sums_and_is_seen_at_the_weights():
    expect = {"row_sums": 1, "matches_reference": True, "first_divergent_stage": "weights",
              "findings": ["softmax_axis"]}
    p = _check("wrong_softmax_axis", expect)
    assert not p["row_sums"].passed and abs(p["row_sums"].observed - 1) > 1e-3
    assert not p["matches_reference"].passed and p["matches_reference"].observed is False
    assert p["first_divergent_stage"].passed and p["findings"].passed


def test_d_in_projection_context_shape():
    p = _check("d_in_projection", {"context_shape": [6, 2], "findings": ["shape_projection"]})
    assert p["context_shape"].observed == [6, 3] and not p["context_shape"].passed
    assert p["findings"].passed


def test_findings_compare_as_sets():
    p = _check("unscaled", {"findings": ["scaling", "scaling"]})
    assert p["findings"].passed and p["findings"].expected == ["scaling"]


@pytest.mark.parametrize("expect, fragment", [
    ({"context_shap": [6, 2]}, "expect.context_shap: unknown prediction; allowed: "),
    ({"context_shape": "6x2"}, "expect.context_shape: expected a list of ints"),
    ({"row_sums": True}, "expect.row_sums: expected a number"),
    ({"matches_reference": "yes"}, "expect.matches_reference: expected true or false"),
    ({"first_divergent_stage": "logits"}, "expect.first_divergent_stage: expected null or one of inputs"),
    ({"findings": "scaling"}, "expect.findings: expected a list of finding codes"),
])
def test_validation_names_the_key_and_what_is_allowed(expect, fragment):
    with pytest.raises(UserError) as info:
        validate_expectations(expect)
    assert fragment in str(info.value) and "allowed: " + ", ".join(ALLOWED) in str(info.value)


def test_valid_expectations_pass_validation():
    validate_expectations({"context_shape": [6, 2], "first_divergent_stage": None, "findings": []})
