"""compute_diagnostics / first_divergent_stage: values checked against direct computations."""

import math

import pytest
import torch

from attnlab.capture.recorder import Capture, capture
from attnlab.capture.stages import STAGES
from attnlab.diagnosis.diagnostics import compute_diagnostics, first_divergent_stage, max_abs_diff
from tests._zoo_helpers import BOOK_INPUTS, CORRECT_STYLES, build, run_pair


def test_reference_shape_trace_and_weight_statistics_on_the_book_input():
    ref = capture(build("reference", 3, 2), BOOK_INPUTS)
    _, _, d, first, _ = run_pair("linear", BOOK_INPUTS, 2)
    assert first is None
    assert ref.stages["weights"].shape == (1, 1, 6, 6) and ref.native_shapes["weights"] == (6, 6)
    w = ref.stages["weights"][0, 0].double()
    assert d["weights_row_sum_max_err"] < 1e-6
    assert d["weights_col_sum_max_err"] == pytest.approx(float((w.sum(0) - 1).abs().max()), rel=1e-5)
    entropy = -(w * w.log()).sum(1)
    assert d["weights_entropy_mean"] == pytest.approx(float(entropy.mean()), rel=1e-5)
    assert d["weights_entropy_norm_mean"] == pytest.approx(float(entropy.mean() / math.log(6)), rel=1e-5)
    assert d["weights_row_max_mean"] == pytest.approx(float(w.max(1).values.mean()), rel=1e-5)
    assert d["weights_first_token_mass"] == pytest.approx(float(w[:, 0].mean()), rel=1e-5)
    assert d["scale_observed"] == pytest.approx(2 ** -0.5, rel=1e-6)
    assert d["scale_expected"] == pytest.approx(2 ** -0.5)
    assert d["softmax_dim"] == 1.0
    assert d["batched_single_max_abs_diff"] < 1e-6
    seen = [s for s in STAGES if s != "weights_applied"]  # eval mode, no dropout: weights_applied is weights
    assert all(d[f"shape_ok_{s}"] == 1.0 for s in seen)
    assert all(d[f"non_finite_{s}"] == 0.0 for s in seen)
    assert math.isnan(d["shape_ok_weights_applied"]) and math.isnan(d["non_finite_weights_applied"])
    # nn.Linear's x @ W.T and the source's x @ W may round differently by one float32 ulp (the BLAS kernel
    # depends on the CPU): equal up to rounding, and the output is the context
    assert d["divergence_output"] == d["divergence_context"] < 1e-6


@pytest.mark.parametrize("name, first, scale", [
    ("unscaled", "scaled_scores", 1.0), ("scaled_by_dk", "scaled_scores", 0.5),
    ("wrong_softmax_axis", "weights", 2 ** -0.5), ("keys_as_queries", "queries", 2 ** -0.5),
    ("values_from_key", "values", 2 ** -0.5), ("shifted_keys", "keys", 2 ** -0.5),
    ("prescaled_by_dk", "scaled_scores", 0.5), ("manual_softmax_unscaled", "scaled_scores", 1.0),
])
def test_first_divergent_stage_and_observed_scale(name, first, scale):
    _, _, d, divergent, _ = run_pair(name, BOOK_INPUTS, 2)
    assert divergent == first
    assert d["scale_observed"] == pytest.approx(scale, rel=1e-5)


def test_divergence_is_max_abs_difference_and_nan_on_shape_mismatch():
    v, r, d, first, _ = run_pair("unscaled", BOOK_INPUTS, 2)
    expected = float((v.stages["weights"] - r.stages["weights"]).abs().max())
    assert d["divergence_weights"] == pytest.approx(expected)
    assert d["relative_divergence_weights"] == pytest.approx(expected / float(r.stages["weights"].abs().max()))
    assert d["divergence_queries"] == 0.0
    _, _, d, first, _ = run_pair("d_in_projection", BOOK_INPUTS, 2)
    assert math.isnan(d["divergence_values"]) and d["shape_ok_values"] == 0.0 and d["shape_ok_context"] == 0.0
    assert first == "values"


def test_wrong_axis_columns_sum_to_one_and_batched_single_disagrees():
    _, _, d, _, _ = run_pair("wrong_softmax_axis", BOOK_INPUTS, 2)
    assert d["weights_col_sum_max_err"] < 1e-6 < d["weights_row_sum_max_err"]
    assert d["softmax_dim"] == 0.0
    assert d["batched_single_max_abs_diff"] > 1e-3


def test_missing_stages_give_nan_not_guesses():
    x = BOOK_INPUTS
    only_ends = Capture({"inputs": x[None], "output": x[None, :, :2]}, {"inputs": (6, 3), "output": (6, 2)},
                        {"queries": None, "keys": None, "values": None}, None,
                        [s for s in STAGES if s not in ("inputs", "output", "weights_applied")])
    ref = capture(build("reference", 3, 2), x)
    d, per_head = compute_diagnostics(only_ends, ref)
    for key in ("divergence_weights", "divergence_context", "scale_observed", "scale_expected", "softmax_dim",
                "batched_single_max_abs_diff", "weights_entropy_mean", "shape_ok_scores", "shape_ok_context"):
        assert math.isnan(d[key]), key
    assert d["shape_ok_output"] == 1.0 and d["divergence_output"] > 0
    assert per_head == {}
    assert first_divergent_stage(only_ends, ref) == "output"


def test_block_max_abs_diff_equals_direct():
    torch.manual_seed(0)
    a, b = torch.randn(2500, 300), torch.randn(2500, 300)
    assert max_abs_diff(a, b) == float((a - b).abs().max())


@pytest.mark.parametrize("cls", CORRECT_STYLES, ids=lambda c: c.__name__)
def test_correct_styles_do_not_diverge(cls):
    torch.manual_seed(1)
    _, _, d, first, _ = run_pair(cls, torch.randn(64, 16), 8)
    assert first is None
    assert d["batched_single_max_abs_diff"] < 1e-4


def test_prescaled_correct_variant_scores_are_honest():
    """A correct pre-scaled variant: the scores stage is the raw product, so it does not diverge,
    and scale_observed is the effective factor from q @ k.T to the softmax input."""
    torch.manual_seed(2)
    v, r, d, first, _ = run_pair(CORRECT_STYLES[4], torch.randn(40, 12), 9)
    assert v.prescale == pytest.approx({"queries": 9 ** -0.5})
    assert first is None
    assert d["divergence_queries"] == 0.0
    assert d["relative_divergence_scores"] < 1e-5
    assert d["scale_observed"] == pytest.approx(9 ** -0.5, rel=1e-5)
    assert d["weights_softmax_max_err"] < 1e-5


@pytest.mark.slow
def test_diagnostics_at_4096_tokens():
    torch.manual_seed(0)
    x = torch.rand(4096, 64)
    v, r, d, first, findings = run_pair("unscaled", x, 64)
    assert first == "scaled_scores"
    assert d["scale_observed"] == pytest.approx(1.0, rel=1e-5)
    assert d["weights_row_sum_max_err"] < 1e-3
    assert not math.isnan(d["batched_single_max_abs_diff"])


@pytest.mark.parametrize("odd", ["none", "tiny", "negative", "nan"])
def test_the_weights_entropy_in_one_pass_is_plain_torchs(odd):
    """The weights' entropy (vectorised log where no weight is below 0, xlogy elsewhere) against
    -sum(w log w) in float64 with 0 log 0 = 0, per head and averaged over rows, to 1e-6; a negative
    weight or a NaN gives NaN as xlogy does."""
    from attnlab.diagnosis.diagnostics import _weights_diagnostics

    n = 300
    scores = torch.randn(2, 3, n, n, generator=torch.Generator().manual_seed(3)) * 5  # (b, nh, T, T)
    weights = torch.softmax(scores.masked_fill(~torch.ones(n, n, dtype=torch.bool).tril(), -torch.inf), dim=-1)
    if odd == "tiny":
        weights[1, 2, 200, 3] = 1e-40  # below float32's smallest normal
    if odd == "negative":
        weights[0, 1, 9, 2] = -0.25
    if odd == "nan":
        weights[1, 0, 4, 0] = float("nan")
    flat, heads = _weights_diagnostics(weights)
    w = weights.double()
    plogp = torch.where(w == 0, torch.zeros((), dtype=torch.float64), w * torch.log(w))  # log of a negative: NaN
    per_head = (-plogp.sum(-1)).mean(-1).mean(0)  # (nh,): each row's entropy, over rows, over the batch
    if odd in ("negative", "nan"):
        assert math.isnan(flat["weights_entropy_mean"]) and any(math.isnan(h) for h in heads["weights_entropy_mean"])
        return
    assert heads["weights_entropy_mean"] == pytest.approx(per_head.tolist(), rel=1e-6)
    assert flat["weights_entropy_mean"] == pytest.approx(float(per_head.mean()), rel=1e-6)
    assert flat["weights_entropy_norm_mean"] == pytest.approx(float(per_head.mean()) / math.log(n), rel=1e-6)
