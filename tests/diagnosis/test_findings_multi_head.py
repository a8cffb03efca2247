"""The multi-head diagnosis: each mistake of sections 3.5-3.6 named first, at its
stage, for the heads and batch items where it holds; no false finding on correct modules.

Expected values come from the zoo plugins' declarations, from the source's classes and from
torch itself (F.dropout's rate, F.scaled_dot_product_attention), never from attnlab's output.
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from attnlab.app.api import compose_config
from attnlab.app.job_settings import inputs_values, job_spec
from attnlab.capture.recorder import capture
from attnlab.capture.stages import STAGES
from attnlab.compute.pipeline import compute_record
from attnlab.diagnosis import batch_mixing
from attnlab.diagnosis.diagnostics import softmax_checks, stage_tolerance
from attnlab.diagnosis.message_format import heads_phrase
from attnlab.inputs.kinds import make_inputs
from attnlab.modules.registry import discover
from attnlab.record import Finding, Record, to_json_dict
from tests._zoo_helpers import multi_head_zoo_specs

IMPLEMENTATIONS = Path(__file__).resolve().parents[1] / "implementations"
INFO_CODES = {"kv_heads", "dropout", "masked"}


ZOO = multi_head_zoo_specs()
# heads of two dimensions: at the book's one (d_out=2, num_heads=2) sqrt(head_dim) is 1, so a mistake in
# the division by it (mha_unscaled, mha_scaled_by_dk) changes no number and has no finding to show
ZOO_D_OUT = 4


def distinct_items(x: torch.Tensor, batch: int = 2) -> torch.Tensor:
    """`batch` different items built from one (n_tokens, d_in) input: reversed, shifted copies."""
    items = [x if i % 2 == 0 else x.flip(0) for i in range(batch)]
    return torch.stack([item * (1 - 0.1 * i) + 0.05 * i for i, item in enumerate(items)])  # (batch, n_tokens, d_in)


def record_of(name: str, *, distinct: bool = True, seed: int = 123, overrides: tuple[str, ...] = (),
              **keys) -> Record:
    """The engine's record for one seed; `distinct`: the batch items differ (inputs stack one draw)."""
    cfg = compose_config(name, seed, overrides, **keys)
    inputs = make_inputs(inputs_values(cfg), seed)
    items = distinct_items(inputs.embeddings, cfg.batch) if distinct else None
    return compute_record(job_spec(cfg), seed, inputs, items=items)


def first_error_or_note(findings: list[Finding], code: str) -> Finding:
    """The finding the zoo declares: the first error, or for a deliberate change the first note."""
    if code in INFO_CODES:
        return findings[0]
    return next(f for f in findings if f.severity == "error")


def test_the_zoo_covers_every_code_of_the_issue():
    codes = {s.expected_finding[0] for s in ZOO}
    assert {"head_split", "head_merge", "scaling", "softmax_axis", "mask_missing", "mask_offset", "mask_after_softmax",
            "mask_fill_value", "out_proj", "shape_projection", "batch_mixing", "dropout_active", "kv_heads"} <= codes
    assert len(ZOO) >= 10


@pytest.mark.parametrize("spec", ZOO, ids=lambda s: s.name)
def test_zoo_first_finding_is_its_bug_with_nothing_earlier(spec):
    record = record_of(spec.name, d_out=ZOO_D_OUT)
    assert record.status == "ok", record.error
    code, stage = spec.expected_finding
    found = first_error_or_note(record.findings, code)
    assert (found.code, found.stage) == (code, stage), [(f.code, f.stage) for f in record.findings]
    earliest = STAGES.index(stage)
    assert all(STAGES.index(f.stage) >= earliest for f in record.findings), [(f.code, f.stage) for f in record.findings]
    assert found.message.endswith(".")
    # a mask bug shows at scaled_scores; undivided heads are named at the output's width, which
    # their per-head projections (the first divergent stages) explain
    floor = STAGES.index("queries") if code == "shape_projection" else min(earliest, STAGES.index("scaled_scores"))
    assert record.first_divergent_stage is None or STAGES.index(record.first_divergent_stage) >= floor


@pytest.mark.parametrize("spec", [s for s in ZOO if s.expected_finding[0] != "batch_mixing"], ids=lambda s: s.name)
def test_zoo_on_the_books_stacked_inputs(spec):
    """The source's torch.stack((inputs, inputs)): every bug but batch mixing shows without distinct items."""
    record = record_of(spec.name, distinct=False, d_out=ZOO_D_OUT)
    found = first_error_or_note(record.findings, spec.expected_finding[0])
    assert (found.code, found.stage) == spec.expected_finding
    assert record.not_checked == [batch_mixing.NOT_CHECKED_EQUAL]


def test_equal_batch_items_say_batch_mixing_was_not_checked():
    record = record_of("causal_batch_centred_keys", distinct=False)
    assert record.not_checked == ["batch mixing not checked: the batch items are equal; use inputs=random"]
    assert "batch_mixing" not in {f.code for f in record.findings}
    assert json.loads(json.dumps(to_json_dict(record)))["not_checked"] == record.not_checked


def test_batch_mixing_names_the_items_and_hides_its_consequences():
    record = record_of("causal_batch_centred_keys")
    (finding,) = record.findings
    assert (finding.code, finding.stage, finding.batch) == ("batch_mixing", "keys", [0, 1])
    assert "dim 0" in finding.message and record.not_checked == []


@pytest.mark.parametrize("name", ["causal_attention", "multi_head_attention", "mha_wrapper", "torch_mha"])
def test_correct_modules_do_not_mix_distinct_batch_items(name):
    record = record_of(name, d_out=3 if name == "torch_mha" else 2, num_heads=3 if name == "torch_mha" else 2)
    assert record.status == "ok", record.error
    assert record.findings == [] and record.not_checked == []


def test_batch_mixing_check_against_torch_per_item():
    """check() against an independent per-item computation: a mean over dim 0 mixes, F.sdpa does not."""
    x = torch.rand(3, 5, 4, generator=torch.Generator().manual_seed(0))

    class Mixing(torch.nn.Module):
        def __init__(self, mixes: bool):
            super().__init__()
            self.W_query, self.W_key, self.W_value = (torch.nn.Linear(4, 4) for _ in range(3))
            self.mixes = mixes

        def forward(self, x):
            queries, keys, values = self.W_query(x), self.W_key(x), self.W_value(x)  # (b, num_tokens, d_out)
            if self.mixes:
                values = values - values.mean(dim=0)  # (b, num_tokens, d_out)
            return F.scaled_dot_product_attention(queries, keys, values, is_causal=True)  # (b, num_tokens, d_out)

    for mixes in (False, True):
        module = Mixing(mixes).eval()
        result = batch_mixing.check(lambda item: capture(module, item), x, capture(module, x))
        assert result.stage == ("values" if mixes else None)
        assert result.items == ([0, 1, 2] if mixes else [])


@pytest.mark.slow
def test_findings_name_the_heads_where_they_hold(plugin_folder, use_plugins):
    """Only head 0's values are scaled: the finding holds for head 0 of every batch item."""
    source = Path(discover().specs["multi_head_attention"].source).read_text()
    source = source.replace('"multi_head_attention"', '"head0_values"').replace(
        "        attn_scores = queries @ keys.transpose(2, 3)",
        "        values = values * torch.tensor([3.0] + [1.0] * (self.num_heads - 1)).view(1, -1, 1, 1)\n"
        "        attn_scores = queries @ keys.transpose(2, 3)")
    use_plugins(plugin_folder("head0_values", source))
    record = record_of("head0_values", d_out=8, num_heads=4, reference="multi_head_attention")
    (finding,) = record.findings
    assert (finding.code, finding.heads, finding.batch) == ("value_path", [0], [0, 1])
    assert heads_phrase(finding, 4) == "head 0"


def test_heads_phrase():
    def f(heads):
        return Finding("scaling", "scaled_scores", "error", "m.", heads=heads)

    assert heads_phrase(f([0, 1, 2, 3]), 12) == "heads 0-3"
    assert heads_phrase(f(list(range(12))), 12) == "all heads"
    assert heads_phrase(f(None), 12) == "all heads"
    assert heads_phrase(f([0, 1, 5]), 12) == "heads 0-1, 5"
    assert heads_phrase(f([7]), 12) == "head 7"


def test_heads_and_batch_are_null_only_without_such_an_axis():
    causal = record_of("causal_mask_missing").findings[0]
    assert causal.heads is None and causal.batch == [0, 1]  # CausalAttention has no heads axis
    multi = record_of("mha_mask_diagonal_2").findings[0]
    assert multi.heads == [0, 1] and multi.batch == [0, 1]
    split = record_of("mha_head_split").findings[0]
    assert split.heads is None and split.batch == [0, 1]  # about splitting the heads itself


def test_scaling_names_the_factor_used_and_the_right_one():
    (finding,) = record_of("mha_scaled_by_d_out", d_out=8, num_heads=4).findings
    assert "0.3536 = 1/sqrt(d_out) with d_out = 8" in finding.message
    assert "expected 0.7071 (1/sqrt(head_dim), head_dim = keys.shape[-1] = 2)" in finding.message


@pytest.mark.slow
def test_scaling_recognises_1_over_sqrt_d_in(plugin_folder, use_plugins):
    source = Path(discover().specs["multi_head_attention"].source).read_text().replace('"multi_head_attention"', '"by_d_in"').replace(
        "attn_scores / keys.shape[-1] ** 0.5", "attn_scores / d_in ** 0.5")
    use_plugins(plugin_folder("by_d_in", source))
    (finding,) = record_of("by_d_in", d_out=8, num_heads=4, reference="multi_head_attention").findings
    assert finding.code == "scaling" and "1/sqrt(d_in) with d_in = 3" in finding.message


def test_softmax_over_the_heads_under_a_causal_mask_is_softmax_axis_not_non_finite():
    findings = record_of("mha_softmax_head_axis").findings
    assert [(f.code, f.stage) for f in findings] == [("softmax_axis", "weights")]
    assert "0/0 = NaN" in findings[0].message and "heads (dim 1)" in findings[0].message


def test_mask_offset_says_which_way():
    hidden = record_of("causal_mask_diagonal_0").findings
    assert [f.code for f in hidden] == ["mask_offset"] and "hides each token from itself" in hidden[0].message
    ahead = record_of("mha_mask_diagonal_2").findings[0]
    assert "diagonal=2" in ahead.message and "see the next token" in ahead.message


@pytest.mark.slow
def test_a_very_negative_fill_is_a_mask(plugin_folder, use_plugins):
    """masked_fill_(mask, -1e9) gives the same weights as -inf: nothing to report."""
    source = Path(discover().specs["causal_mask_fill_zero"].source).read_text().replace('"causal_mask_fill_zero"', '"fill_neg"')
    source = source.replace("0.0)  # changed: 0, not -torch.inf", "-1e9)").replace("expected_finding=", "# ")
    use_plugins(plugin_folder("fill_neg", source))
    assert record_of("fill_neg", reference="causal_attention").findings == []


def test_the_undivided_wrapper_names_the_output_width():
    finding = record_of("impl_wrapper_undivided").findings[0]
    assert (finding.code, finding.stage) == ("shape_projection", "output")
    assert finding.message.startswith("the output has 4 columns where the reference has d_out=2 (num_heads·d_out)")
    assert "queries, keys, values have 2 columns where head_dim=1" in finding.message


@pytest.mark.parametrize("name", ["causal_attention", "multi_head_attention", "mha_wrapper", "torch_mha"])
def test_batched_single_recomputes_each_row_with_the_mask(name):
    """The source's row check on correct causal modules: within tolerance, so never a finding."""
    cfg = compose_config(name, 7, inputs="random", d_out=4, num_heads=2, overrides=["inputs.d_in=4",
                                                                                   "inputs.n_tokens=9"])
    record = compute_record(job_spec(cfg), 7, make_inputs(inputs_values(cfg), 7))
    assert "batched_single_mismatch" not in {f.code for f in record.findings}
    assert record.variant.diagnostics["batched_single_max_abs_diff"] < 1e-5


def test_batched_single_sees_the_mask():
    """Without the mask the row check would differ: the check can fail."""
    torch.manual_seed(0)
    module = discover().specs["causal_attention"].cls(4, 4, 9, 0.0).eval()
    captured = capture(module, torch.rand(2, 9, 4))
    assert softmax_checks(captured)[1] <= stage_tolerance("context", captured)
    captured.stages["scaled_scores"] = captured.stages["scaled_scores"].nan_to_num(neginf=0.0)  # the mask removed
    assert softmax_checks(captured)[1] > stage_tolerance("context", captured)


def test_dropout_in_training_is_a_note_with_its_rate():
    record = record_of("multi_head_attention", train=True, dropout=0.5, overrides=("inputs=random", "inputs.n_tokens=32",
                                                                                    "inputs.d_in=8"), d_out=8)
    assert [(f.code, f.severity) for f in record.findings] == [("dropout", "info")]
    rate = float(record.findings[0].message.split("estimated rate p = ")[1].split(";")[0])
    assert rate == pytest.approx(0.5, abs=1e-6)  # the factor 2 = 1/(1 - p) F.dropout applies


def test_hard_coded_dropout_in_eval_mode_names_the_rate():
    (finding,) = record_of("causal_dropout_always").findings
    assert finding.code == "dropout_active" and "p = 0.5" in finding.message and "training=self.training" in finding.message


CORRECT = ["bonus_pytorch_mha", "einsum_mha", "nanogpt_block", "nn_mha_need_weights", "nn_mha_no_weights",
           "qkvo_proj", "sdpa_bool_mask", "multi_head_attention", "torch_mha", "mha_wrapper", "causal_attention"]
NEEDS_SQUARE = {"nanogpt_block", "nn_mha_need_weights", "nn_mha_no_weights", "torch_mha", "bonus_pytorch_mha"}


@pytest.mark.parametrize("name", CORRECT)
@settings(max_examples=3, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(batch=st.integers(2, 3), heads=st.integers(1, 4), tokens=st.integers(2, 16), head_dim=st.integers(1, 6),
       d_in=st.integers(1, 16), seed=st.integers(0, 10_000))
@pytest.mark.slow
def test_correct_implementations_have_no_finding_on_distinct_items(use_plugins, name, batch, heads, tokens, head_dim,
                                                                    d_in, seed):
    """tests/compute/test_multi_head.py's corpus, with batch items that differ (so batch mixing is checked)."""
    use_plugins(IMPLEMENTATIONS)
    d_out = heads * head_dim
    d_in = d_out if name in NEEDS_SQUARE else d_in
    record = record_of(name, seed=seed, d_out=d_out, num_heads=heads, batch=batch, inputs="random",
                       overrides=(f"inputs.n_tokens={tokens}", f"inputs.d_in={d_in}"))
    assert record.status == "ok", record.error
    assert [(f.code, f.message) for f in record.findings if f.severity != "info"] == []
    assert record.not_checked == []


@pytest.mark.parametrize("name", CORRECT)
@pytest.mark.slow
def test_training_mode_gives_dropout_only_as_a_note(use_plugins, name):
    use_plugins(IMPLEMENTATIONS)
    record = record_of(name, train=True, dropout=0.5, d_out=4, num_heads=2, inputs="random",
                       overrides=("inputs.n_tokens=8", "inputs.d_in=4"))
    assert record.status == "ok", record.error
    assert {f.code for f in record.findings} <= {"dropout"}
    assert all(f.severity == "info" for f in record.findings)


@pytest.mark.slow
def test_expect_heads_and_findings_through_the_cli(app):
    run = app("variant=mha_head_split", "expect.weights_shape=[2,2,6,6]", "expect.findings=[head_split]",
              "expect.num_heads=2")
    assert run.returncode == 0, run.stderr
    predictions = {p["name"]: p for p in run.record["predictions"]}
    assert all(p["passed"] for p in predictions.values()), predictions
    assert predictions["num_heads"]["observed"] == 2
    (finding,) = run.record["findings"]
    assert finding["code"] == "head_split" and finding["heads"] is None and finding["batch"] == [0, 1]


@pytest.mark.slow
def test_a_wrong_head_count_prediction_fails_through_the_cli(app):
    run = app("variant=causal_attention", "expect.num_heads=2")
    assert run.returncode == 0, run.stderr
    (prediction,) = run.record["predictions"]
    assert prediction == {"name": "num_heads", "expected": 2, "observed": 1, "passed": False}


def test_plugin_sources_mark_their_one_change():
    for spec in ZOO:
        text = Path(spec.source).read_text()
        assert "# changed:" in text, spec.name
        assert textwrap.dedent(text).count("class ") >= 1
