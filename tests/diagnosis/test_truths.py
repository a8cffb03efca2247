"""What a newcomer found: places where attnlab said something untrue, each checked
through the real CLI as the user sees it."""

from __future__ import annotations

import pytest

from tests.conftest import SOURCE_SELF_ATTENTION_V1

pytestmark = pytest.mark.slow


def _edited(body: str) -> str:
    """The source's SelfAttention_v1 with its forward's tail replaced by `body`."""
    head = SOURCE_SELF_ATTENTION_V1[: SOURCE_SELF_ATTENTION_V1.index("        context_vec = attn_weights @ values")]
    return head + body


def test_returning_the_weights_is_a_wrong_output_finding(app, plugin_folder):
    folder = plugin_folder("returns_weights", _edited("        context_vec = attn_weights @ values\n"
                                                      "        return attn_weights  # changed: the weights\n"))
    run = app("variant=returns_weights", env={"ATTNLAB_PLUGIN_PATH": str(folder)})
    assert run.returncode == 0, run.stderr
    findings = run.record["findings"]
    assert [(f["code"], f["stage"]) for f in findings] == [("wrong_output", "output")]
    assert "attention weights" in findings[0]["message"]
    assert "output (6, 6) ✗ predicted (6, 2)" in run.stdout
    assert "no findings" not in run.stdout


def test_an_unknown_width_returned_blames_the_output_not_the_values(app, plugin_folder):
    folder = plugin_folder("returns_width3", _edited("        context_vec = attn_weights @ values\n"
                                                     "        return context_vec @ self.W_query.T  # changed\n"))
    run = app("variant=returns_width3", env={"ATTNLAB_PLUGIN_PATH": str(folder)})
    codes = [(f["code"], f["stage"]) for f in run.record["findings"]]
    assert codes == [("wrong_output", "output")]
    assert "unknown width of 3 columns" in run.record["findings"][0]["message"]


def test_missing_stages_are_named_and_never_claimed_to_match(app, plugin_folder):
    folder = plugin_folder("numpy_scores", _edited(
        "        import numpy as np\n"
        "        scores = torch.from_numpy(queries.numpy() @ keys.numpy().T)  # changed: attnlab cannot see it\n"
        "        weights = torch.softmax(scores / keys.shape[-1] ** 0.5, dim=-1)\n"
        "        return torch.from_numpy(weights.numpy() @ values.numpy())\n"))
    run = app("variant=numpy_scores", env={"ATTNLAB_PLUGIN_PATH": str(folder)})
    assert run.returncode == 0, run.stderr
    assert run.record["findings"] == []
    line = next(line for line in run.stdout.splitlines() if line.startswith("no findings"))
    assert "matches the reference at every stage" not in line
    assert "not checked: values, context" in line  # its weights line is the source's; the rest is numpy


def test_a_bias_the_reference_lacks_is_zeroed_and_said(app):
    run = app("variant=linear", "qkv_bias=true")
    assert run.returncode == 0, run.stderr
    assert run.record["findings"] == []
    assert run.record["weights_loaded"]["W_query.bias"] == "zeroed (the reference has no bias)"
    old = app("variant=linear", "+variant.params.qkv_bias=true", out="old")
    assert old.returncode == 2
    assert old.stderr.strip() == ("attnlab: error: variant.params.qkv_bias: qkv_bias is a top-level key; "
                                  "use qkv_bias=true")


def test_transposed_scores_keep_their_queries_as_the_queries(app):
    run = app("variant=transposed_scores")
    record = run.record
    assert record["stages"]["queries"]["values"] == record["reference_stages"]["queries"]["values"]
    assert record["first_divergent_stage"] == "scores"
    assert [(f["code"], f["stage"]) for f in record["findings"]] == [("scores_transposed", "scores")]
