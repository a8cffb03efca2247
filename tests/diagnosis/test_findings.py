"""The diagnosis: the root cause first, consequences suppressed, no false findings."""

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from attnlab.capture.stages import STAGES
from tests._zoo_helpers import BOOK_INPUTS, CORRECT_STYLES, ConstantAttention, codes, run_pair, zoo_specs

ZOO = zoo_specs()


def test_zoo_is_complete():
    expected = {"scaling", "query_source", "value_path", "shape_projection", "not_softmax",
                "scores_transposed", "key_index", "softmax_axis"}
    assert expected <= {s.expected_finding[0] for s in ZOO}
    assert len(ZOO) >= 11
    assert {"prescaled_by_dk", "manual_softmax_unscaled"} <= {s.name for s in ZOO}


@pytest.mark.parametrize("spec", ZOO, ids=lambda s: s.name)
def test_zoo_variant_first_finding_is_its_bug(spec):
    _, _, _, _, findings = run_pair(spec.name, BOOK_INPUTS, 2)
    assert findings, spec.name
    assert codes(findings)[0] == spec.expected_finding
    earliest = STAGES.index(spec.expected_finding[1])
    assert all(STAGES.index(f.stage) >= earliest for f in findings)
    assert all(f.message.endswith(".") and f.stage in f.message or f.code in ("scaling", "softmax_axis")
               for f in findings)


@pytest.mark.parametrize("name", ["reference", "linear"])
def test_correct_variants_have_no_findings(name):
    assert run_pair(name, BOOK_INPUTS, 2)[4] == []


def test_scaling_message_gives_observed_and_expected_factor():
    (finding,) = run_pair("unscaled", BOOK_INPUTS, 2)[4]
    assert "1.0" in finding.message and "0.7071" in finding.message


def test_prescaled_wrong_factor_names_the_factors_and_the_prescaled_stage():
    (finding,) = run_pair("prescaled_by_dk", BOOK_INPUTS, 2)[4]
    assert finding.code == "scaling" and finding.stage == "scaled_scores"
    assert "scaled by 0.5 in all" in finding.message and "expected 0.7071" in finding.message
    assert "the queries were multiplied by 0.5 before the score product" in finding.message


def test_manual_softmax_unscaled_is_scaling_not_not_softmax():
    (finding,) = run_pair("manual_softmax_unscaled", BOOK_INPUTS, 2)[4]
    assert finding.code == "scaling"
    assert "scaled by 1.0" in finding.message and "0.7071" in finding.message


def test_wrong_axis_reports_only_the_axis():
    assert codes(run_pair("wrong_softmax_axis", BOOK_INPUTS, 2)[4]) == [("softmax_axis", "weights")]


def test_shifted_keys_names_the_shifted_row():
    (finding,) = run_pair("shifted_keys", BOOK_INPUTS, 2)[4]
    assert "keys row i matches reference row i-1" in finding.message


@pytest.mark.parametrize("spec", ZOO, ids=lambda s: s.name)
def test_unshared_weights_keep_only_self_consistent_checks(spec):
    findings = run_pair(spec.name, BOOK_INPUTS, 2, shared=False)[4]
    if spec.expected_finding[0] == "key_index":  # only visible against the reference's values
        assert findings == []
    else:
        assert codes(findings)[0] == spec.expected_finding


def test_unshared_correct_variant_has_no_findings():
    assert run_pair("linear", BOOK_INPUTS, 2, shared=False)[4] == []


def test_invisible_variant_gets_no_guessed_findings():
    v, _, _, _, findings = run_pair(ConstantAttention, BOOK_INPUTS, 2)
    assert v.missing == [s for s in STAGES if s not in ("inputs", "weights_applied", "output")]
    assert set(v.stages) == {"inputs", "output"} and not v.output_is_context
    assert findings == []  # its output differs, but no context was seen to match or not: nothing is guessed


def _inputs(n: int, d: int, normal: bool, seed: int) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    return torch.randn(n, d, generator=generator) if normal else torch.rand(n, d, generator=generator)


_STYLES = st.sampled_from(["reference", "linear", *CORRECT_STYLES])


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(style=_STYLES, n=st.integers(1, 96), d_in=st.integers(1, 48), d_out=st.integers(1, 48),
       normal=st.booleans(), seed=st.integers(0, 2**16))
def test_no_false_findings_small(style, n, d_in, d_out, normal, seed):
    _, _, _, first, findings = run_pair(style, _inputs(n, d_in, normal, seed), d_out, seed=seed)
    assert findings == [] and first is None


_NEW_STYLES = st.sampled_from(CORRECT_STYLES[4:])  # pre-scaled queries/keys, hand-written softmax, log_softmax


@settings(max_examples=16, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(style=_NEW_STYLES, n=st.integers(1, 128), d_in=st.integers(1, 64), d_out=st.integers(1, 64),
       normal=st.booleans(), seed=st.integers(0, 2**16))
def test_no_false_findings_prescaled_and_hand_written_softmax(style, n, d_in, d_out, normal, seed):
    _, _, d, first, findings = run_pair(style, _inputs(n, d_in, normal, seed), d_out, seed=seed)
    assert findings == [] and first is None
    assert d["scale_observed"] == pytest.approx(d["scale_expected"], rel=1e-4)


_SCALING_BUGS = st.sampled_from(["prescaled_by_dk", "manual_softmax_unscaled", "unscaled", "scaled_by_dk"])


@settings(max_examples=16, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(name=_SCALING_BUGS, n=st.integers(1, 128), d_in=st.integers(1, 64), d_out=st.integers(2, 64),
       normal=st.booleans(), seed=st.integers(0, 2**16), shared=st.booleans())
def test_scaling_bugs_get_scaling_first(name, n, d_in, d_out, normal, seed, shared):
    _, _, d, _, findings = run_pair(name, _inputs(n, d_in, normal, seed), d_out, seed=seed, shared=shared)
    assert codes(findings)[0] == ("scaling", "scaled_scores")
    assert "not_softmax" not in {f.code for f in findings}


@pytest.mark.slow
@pytest.mark.parametrize("name", ["prescaled_by_dk", "manual_softmax_unscaled"])
def test_scaling_bugs_at_4096_tokens(name):
    _, _, _, _, findings = run_pair(name, _inputs(4096, 512, True, 0), 256)
    assert codes(findings)[0] == ("scaling", "scaled_scores")


@pytest.mark.slow
@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(style=st.one_of(_STYLES, _NEW_STYLES), n=st.integers(512, 4096), d_in=st.sampled_from([64, 512]), d_out=st.sampled_from([32, 256]),
       normal=st.booleans(), seed=st.integers(0, 2**16))
def test_no_false_findings_large(style, n, d_in, d_out, normal, seed):
    _, _, _, _, findings = run_pair(style, _inputs(n, d_in, normal, seed), d_out, seed=seed)
    assert findings == []


class CausalAttention(torch.nn.Module):
    """The source's next step (section 3.5): SelfAttention_v1 with a causal mask; options make it buggy."""

    def __init__(self, d_in, d_out, scale=True, dim=-1, mask_all_of_row_0=False):
        super().__init__()
        self.W_query = torch.nn.Parameter(torch.rand(d_in, d_out))
        self.W_key = torch.nn.Parameter(torch.rand(d_in, d_out))
        self.W_value = torch.nn.Parameter(torch.rand(d_in, d_out))
        self.scale, self.dim, self.mask_all_of_row_0 = scale, dim, mask_all_of_row_0

    def forward(self, x):
        keys, queries, values = x @ self.W_key, x @ self.W_query, x @ self.W_value
        attn_scores = queries @ keys.T
        mask = torch.triu(torch.ones(len(x), len(x)), diagonal=1).bool()
        if self.mask_all_of_row_0:
            mask[0] = True
        masked = attn_scores.masked_fill(mask, -torch.inf)
        divisor = keys.shape[-1] ** 0.5 if self.scale else 1.0
        attn_weights = torch.softmax(masked / divisor, dim=self.dim)
        return attn_weights @ values


def causal(**options):
    return type("Causal", (CausalAttention,), {"__init__": lambda self, d_in, d_out: CausalAttention.__init__(self, d_in, d_out, **options)})


def test_a_causal_mask_is_an_info_finding_not_a_non_finite_bug():
    _, _, d, first, findings = run_pair(causal(), BOOK_INPUTS, 2)
    assert codes(findings) == [("masked", "scaled_scores")] and findings[0].severity == "info"
    assert "15 of the 36 scaled_scores are -inf: a causal mask" in findings[0].message
    assert first == "scaled_scores" and d["non_finite_scaled_scores"] == 0  # the mask placed every -inf


@pytest.mark.parametrize("options,expected", [
    ({"scale": False}, ("scaling", "scaled_scores")),
    ({"dim": 0}, ("softmax_axis", "weights")),
    ({"mask_all_of_row_0": True}, ("non_finite", "scaled_scores")),
])
def test_a_bug_behind_a_causal_mask_is_still_found(options, expected):
    _, _, _, _, findings = run_pair(causal(**options), BOOK_INPUTS, 2)
    errors = [(f.code, f.stage) for f in findings if f.severity == "error"]
    assert errors[0] == expected, codes(findings)


def test_transposed_scores_keep_their_queries_and_diverge_first_at_the_scores():
    """keys @ queries.T: the queries line is unchanged, so the queries stage is the reference's
    queries (labelled by the parameter they come from); the scores are the first
    stage to differ, and the root cause stays scores_transposed."""
    v, r, d, first, findings = run_pair("transposed_scores", BOOK_INPUTS, 2)
    assert torch.equal(v.stages["queries"], r.stages["queries"])
    assert torch.equal(v.stages["keys"], r.stages["keys"])
    assert not torch.equal(v.stages["queries"], r.stages["keys"])  # the two differ: the check above can fail
    assert d["divergence_queries"] == d["divergence_keys"] == 0.0
    assert first == "scores"
    torch.testing.assert_close(v.stages["scores"], r.stages["scores"].mT)
    assert codes(findings)[0] == ("scores_transposed", "scores")
