"""expect: validated up front, each prediction checked against the run."""

import re

import pytest

from attnlab.diagnosis.predictions import ALLOWED, check_predictions, validate_expectations
from attnlab.errors import UserError
from tests._zoo_helpers import BOOK_INPUTS, run_pair
from tests.conftest import REPO


def _check(name, expect):
    v, _, d, first, findings = run_pair(name, BOOK_INPUTS, 2)
    return {p.name: p for p in check_predictions(expect, v, d, first, findings)}


def test_correct_predictions_on_the_reference_pass():
    expect = {"context_shape": [6, 2], "output_shape": [6, 2], "weights_shape": [6, 6], "row_sums": 1,
              "matches_reference": True,
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
    ({"findings": 7}, "expect.findings: expected a finding code or a list of them"),
    ({"findings": [7]}, "expect.findings: expected a finding code or a list of them"),
    ({"softmax_dim": "last"}, "expect.softmax_dim: expected an int or null"),
])
def test_validation_names_the_key_and_what_is_allowed(expect, fragment):
    with pytest.raises(UserError) as info:
        validate_expectations(expect)
    assert fragment in str(info.value) and "allowed: " + ", ".join(ALLOWED) in str(info.value)


def test_valid_expectations_pass_validation():
    validate_expectations({"context_shape": [6, 2], "first_divergent_stage": None, "findings": []})


def test_a_single_finding_code_validates_as_a_list_of_one():
    validate_expectations({"findings": "scaling"})


def _readme_prediction_rows() -> dict[str, list[str]]:
    """{key: [examples]} from the table of the guide's "Predictions" section."""
    text = (REPO / "docs" / "guide" / "configuration.md").read_text()
    section = text.split("## Predictions", 1)[1].split("\n#", 1)[0]
    rows = {}
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 4 and cells[0].startswith("`"):
            rows[cells[0].strip("`")] = [e.strip("'") for e in re.findall(r"`([^`]*expect\.[^`]*)`", cells[2])]
    return rows


def test_readme_documents_every_key_with_an_example():
    rows = _readme_prediction_rows()
    assert list(rows) == list(ALLOWED)
    assert all(len(examples) == 1 and examples[0].startswith(f"expect.{key}=") for key, examples in rows.items())


@pytest.mark.slow
def test_every_readme_example_passes_for_unscaled_through_the_cli(app):
    examples = [examples[0] for examples in _readme_prediction_rows().values()]
    run = app("variant=unscaled", *examples)
    assert run.returncode == 0, run.stderr
    predictions = run.record["predictions"]
    assert [p["name"] for p in predictions] == list(ALLOWED)
    assert all(p["passed"] for p in predictions), predictions
    assert "predict softmax_dim = -1: pass (observed 1)" in run.stdout


@pytest.mark.slow
@pytest.mark.parametrize("variant, dim, observed, passed", [
    ("reference", -1, 1, True),  # the source's dim=-1
    ("reference", 1, 1, True),
    ("wrong_softmax_axis", -1, 0, False),  # normalising must not make every dim pass
    ("wrong_softmax_axis", -2, 0, True),
    ("reference", -3, 1, False),  # out of range for 2-D weights: nothing to count from
])
def test_a_negative_softmax_dim_counts_from_the_end_of_the_weights(app, variant, dim, observed, passed):
    run = app(f"variant={variant}", f"expect.softmax_dim={dim}")
    assert run.returncode == 0, run.stderr
    [prediction] = run.record["predictions"]
    assert prediction == {"name": "softmax_dim", "expected": dim, "observed": observed, "passed": passed}


@pytest.mark.slow
@pytest.mark.parametrize("code, passed", [("scaling", True), ("softmax_axis", False)])
def test_a_single_finding_code_is_checked_as_a_list_of_one(app, code, passed):
    run = app("variant=unscaled", f"expect.findings={code}")
    assert run.returncode == 0, run.stderr
    [prediction] = run.record["predictions"]
    assert prediction == {"name": "findings", "expected": [code], "observed": ["scaling"], "passed": passed}


@pytest.mark.slow
def test_a_finding_that_is_not_a_code_is_a_one_line_error(app, tmp_path):
    run = app("variant=unscaled", "expect.findings=7")
    assert run.returncode == 2
    assert run.stderr.strip().splitlines() == [
        "attnlab: error: expect.findings: expected a finding code or a list of them, like scaling or "
        "[scaling,softmax_axis], got 7; allowed: " + ", ".join(ALLOWED)]
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("given, fragment", [
    ("scalling", "expect.findings: scalling is not a finding code; did you mean scaling? declared: "),
    (["scaling", "sofmax_axis"], "expect.findings: sofmax_axis is not a finding code; did you mean softmax_axis? "),
    ("xyz", "expect.findings: xyz is not a finding code; declared: "),
])
def test_a_finding_code_no_check_declares_is_refused_with_the_closest(given, fragment):
    with pytest.raises(UserError) as info:
        validate_expectations({"findings": given})
    message = str(info.value)
    assert message.startswith(fragment) and "\n" not in message
    assert "scores_transposed" in message and "precision" in message  # the declared codes, listed


@pytest.mark.slow
def test_a_mistyped_finding_code_is_a_one_line_error_before_any_work(app, tmp_path):
    run = app("variant=unscaled", "expect.findings=scalling")
    assert run.returncode == 2
    [line] = run.stderr.strip().splitlines()
    assert line.startswith("attnlab: error: expect.findings: scalling is not a finding code; did you mean scaling?")
    assert not (tmp_path / "out").exists()
