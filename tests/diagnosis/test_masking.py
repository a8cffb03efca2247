"""A mask is defined once: an entry of the softmax input whose weight is exactly 0
counts as -inf, whatever finite fill put it there (torch.finfo(float32).min as Hugging Face's eager
path uses, -1e9, -1e4); `non_finite_*` counts only what no mask placed.

Each fill is a copy of a built-in plugin, written here, with its `-torch.inf` replaced."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import torch

import attnlab
from tests._zoo_helpers import run_pair

PLUGINS = Path(attnlab.__file__).parent / "plugins"
FILLS = {"finfo_min": "torch.finfo(torch.float32).min", "minus_1e9": "-1e9", "minus_1e4": "-1e4"}
SIZES = ["inputs=random", "inputs.n_tokens=8", "inputs.d_in=8", "d_out=8", "num_heads=2"]


def _copy(plugin_folder, use_plugins, built_in: str, fill: str) -> str:
    """The built-in's file under a new variant name, its mask filled with `fill` instead of -inf."""
    name = f"{built_in}_{fill}"
    [path] = PLUGINS.rglob(f"{built_in}.py")  # plugins/<group>/<name>.py
    source = path.read_text()
    declared = f'\n    "{built_in}",\n'  # the decorator's name line (the finding a variant declares may share it)
    assert source.count("-torch.inf") == 1 and source.count(declared) == 1
    source = source.replace("-torch.inf", FILLS[fill]).replace(declared, f'\n    "{name}",\n')
    use_plugins(plugin_folder(name, source))
    return name


def _record(variant: str, reference: str, *sizes: str):
    return attnlab.run(variant, overrides=[f"reference={reference}", *sizes]).record


def _codes(record) -> list[tuple[str, str, str]]:
    return [(f.code, f.stage, f.severity) for f in record.findings]


@pytest.mark.parametrize("fill", sorted(FILLS))
@pytest.mark.slow
def test_a_finite_fill_whose_weight_is_0_is_the_reference_mask(plugin_folder, use_plugins, fill):
    name = _copy(plugin_folder, use_plugins, "multi_head_attention", fill)
    record = _record(name, "multi_head_attention", *SIZES)
    weights, scaled = record.variant.matrix("weights"), record.variant.matrix("scaled_scores")
    future = np.triu(np.ones((8, 8), dtype=bool), 1)
    assert (weights[..., future] == 0).all() and np.isfinite(scaled).all()  # the fill really gives weight 0
    torch_weights = torch.softmax(torch.from_numpy(scaled).masked_fill(torch.from_numpy(future), -torch.inf), dim=-1)
    np.testing.assert_allclose(weights, torch_weights.numpy(), rtol=1e-6, atol=1e-7)  # the same as -inf would give
    assert record.first_divergent_stage is None
    assert record.variant.diagnostics["divergence_scaled_scores"] == 0.0
    assert _codes(record) == []
    assert record.variant.diagnostics["non_finite_scaled_scores"] == 0 and record.variant.diagnostics["non_finite_weights"] == 0


@pytest.mark.parametrize("built_in, reference, sizes", [
    ("multi_head_attention", "reference", SIZES),  # a multi-head causal module against the plain reference
    ("causal", "reference", []),  # the book's six tokens: `masked`
    ("sliding_window", "multi_head_attention", SIZES),  # `window`
    ("softcap", "multi_head_attention", SIZES),  # `softcap`
])
@pytest.mark.parametrize("fill", sorted(FILLS))
@pytest.mark.slow
def test_a_finite_fill_gives_the_findings_of_minus_inf(plugin_folder, use_plugins, built_in, reference, sizes, fill):
    with_inf = _record(built_in, reference, *sizes)
    filled = _record(_copy(plugin_folder, use_plugins, built_in, fill), reference, *sizes)
    assert _codes(filled) == _codes(with_inf) and _codes(with_inf)
    assert filled.first_divergent_stage == with_inf.first_divergent_stage
    assert filled.variant.diagnostics["non_finite_scaled_scores"] == with_inf.variant.diagnostics["non_finite_scaled_scores"] == 0
    np.testing.assert_allclose(filled.variant.matrix("output"), with_inf.variant.matrix("output"), rtol=1e-6, atol=1e-7)


def test_a_correct_causal_module_counts_no_non_finite_values(plugin_folder, use_plugins):
    """The mask's -inf were counted as non-finite values, shown under "What differs"."""
    record = _record("multi_head_attention", "multi_head_attention", *SIZES)
    assert np.isneginf(record.variant.matrix("scaled_scores")).sum() == 28  # the mask is there, as -inf (one head)
    assert all(record.variant.diagnostics[f"non_finite_{stage}"] == 0 for stage in ("scores", "scaled_scores", "weights"))


def test_a_fill_that_leaves_weight_is_still_mask_fill_value():
    """A mask filled with 0 gives the future tokens weight: not a mask, an error."""
    record = _record("causal_mask_fill_zero", "causal_attention")
    assert ("mask_fill_value", "scaled_scores", "error") in _codes(record)


def test_a_score_too_small_for_exp_is_no_mask():
    """A weight of 0 from exp() underflowing (scores hundreds apart, unscaled) is the score's own
    value, not a fill: no `masked` note, no mask pattern to compare, the scaling found first."""
    x = torch.randn(29, 29, generator=torch.Generator().manual_seed(0))
    variant, reference, d, _, findings = run_pair("prescaled_by_dk", x, 2, seed=0, shared=False)
    assert (reference.stages["weights"] == 0).any() and torch.isfinite(reference.stages["scaled_scores"]).all()
    assert [(f.code, f.stage) for f in findings][0] == ("scaling", "scaled_scores")
    assert "masked" not in [f.code for f in findings] and d["non_finite_scaled_scores"] == 0


def test_the_masks_rewritten_at_minus_inf_are_the_fills_and_only_them_in_every_block():
    """with_masks_as_neg_inf on a GPT-2-like softmax input of more rows than one block holds
    (stage_blocks.BLOCK_ROWS): head 0 causal with torch.finfo's minimum, head 1 unmasked, and a NaN
    in one row of head 0 (its weights all NaN: no entry of that row has weight 0, so none is
    rewritten). The expected tensor is built in plain torch from the mask that made it."""
    from attnlab.capture.recorder import Capture
    from attnlab.diagnosis.masking import with_masks_as_neg_inf
    from attnlab.diagnosis.stage_blocks import BLOCK_ROWS

    n = BLOCK_ROWS + 6
    scores = torch.randn(1, 2, n, n, generator=torch.Generator().manual_seed(3)) * 8  # (b, nh, T, T)
    causal = torch.ones(n, n, dtype=torch.bool).tril()
    scaled = scores * 0.125
    scaled[0, 0] = scaled[0, 0].masked_fill(~causal, torch.finfo(torch.float32).min)
    scaled[0, 0, 700, 3] = float("nan")
    weights = torch.softmax(scaled, dim=-1)
    stages = {"scores": scores, "scaled_scores": scaled.clone(), "weights": weights}
    capture = Capture(stages=stages, native_shapes={k: tuple(v.shape) for k, v in stages.items()}, sources={},
                      softmax_dim=3)
    expected = scaled.clone()
    expected[0, 0] = expected[0, 0].masked_fill(~causal, -torch.inf)
    expected[0, 0, 700] = scaled[0, 0, 700]  # its finite fills stay: no weight of that row is 0
    masked = with_masks_as_neg_inf(capture).stages["scaled_scores"]
    assert torch.equal(masked.nan_to_num(nan=7.0), expected.nan_to_num(nan=7.0))
    assert torch.equal(capture.stages["scaled_scores"].nan_to_num(nan=7.0), scaled.nan_to_num(nan=7.0))  # untouched


def _softmax_side(scaled: torch.Tensor, scores: torch.Tensor):
    from attnlab.capture.recorder import Capture

    stages = {"scores": scores, "scaled_scores": scaled, "weights": torch.softmax(scaled, dim=-1)}
    return Capture(stages=stages, native_shapes={k: tuple(v.shape) for k, v in stages.items()}, sources={},
                   softmax_dim=3)


@pytest.mark.parametrize("same_mask", [True, False])
def test_the_minus_infs_known_as_the_fills_are_written_are_those_in_the_tensor(same_mask):
    """The -inf with_masks_as_neg_inf writes are tallied as it writes them (neg_infs reads the
    tally): count, those of weight 0, no NaN or +inf beside them, and the (query, key) pattern when
    every head has the same, against plain torch on the rewritten tensor."""
    from attnlab.diagnosis import masking
    from attnlab.diagnosis.stage_blocks import peaks

    n = masking.FILL_ROWS + 7  # rows in two blocks
    scores = torch.randn(2, 3, n, n, generator=torch.Generator().manual_seed(5)) * 8  # (b, nh, T, T)
    causal = torch.ones(n, n, dtype=torch.bool).tril()
    scores[0, 1, 40, 2] = -1e5  # a score exp() underflows on: weight 0, no fill
    scaled = (scores * 0.125).masked_fill(~causal, torch.finfo(torch.float32).min)
    if not same_mask:
        scaled[1, 2, 9, 3] = torch.finfo(torch.float32).min  # one more fill in one head
    capture = masking.with_masks_as_neg_inf(_softmax_side(scaled, scores))
    masked, weights = capture.stages["scaled_scores"], capture.stages["weights"]
    assert id(masked) in masking._KNOWN  # the tally, not a pass over the tensor
    found = masking.neg_infs(capture, peaks(capture))["scaled_scores"]
    hidden = torch.isneginf(masked)
    assert found.count == int(hidden.sum()) == (~causal).sum() * 6 + (0 if same_mask else 1)
    assert found.placed == int((hidden & (weights == 0)).sum()) and found.clean
    assert masked[0, 1, 40, 2] == scaled[0, 1, 40, 2]  # the underflowed score is no mask
    if same_mask:
        assert torch.equal(found.pattern, ~causal)
    else:
        assert found.pattern is None


@pytest.mark.parametrize("odd", ["none", "nan", "negative_weight"])
def test_the_scale_of_the_fills_is_the_least_squares_factor_over_the_weighted_entries(odd):
    """_scale (its sign(weights) x scores form where a block is finite with weights >= 0, its
    masked form elsewhere) against the factor in float64 over the entries of positive weight that
    are finite on both sides."""
    from attnlab.diagnosis import masking

    n = masking.FILL_ROWS + 3
    scores = torch.randn(1, 2, n, n, generator=torch.Generator().manual_seed(6)) * 4
    scaled = (scores * 0.125).masked_fill(~torch.ones(n, n, dtype=torch.bool).tril(), -1e9)
    weights = torch.softmax(scaled, dim=-1)
    if odd == "nan":
        scaled[0, 1, 5, 0] = float("nan")
    if odd == "negative_weight":
        weights[0, 0, 7, 1] = -0.5
    kept = (weights > 0) & torch.isfinite(scores) & torch.isfinite(scaled)
    s, t = scores.double()[kept], scaled.double()[kept]
    fit = masking._scale(scores, scaled, weights)
    assert fit.scale == pytest.approx(float((s * t).sum() / (s * s).sum()), rel=1e-6)
    assert fit.signed == (odd == "none")  # the sign form throughout only where every block is finite, weights >= 0
    assert fit.finite == [bool(torch.isfinite(scaled[i]).all()) for i in masking.blocks(scaled, masking.FILL_ROWS)]
    assert fit.scores_peak == float(scores.abs().max())  # read off the same pass: exactly max |scores|


@pytest.mark.parametrize("case", ["fills", "underflow", "negative_weight", "bfloat16"])
def test_the_fitted_scale_of_the_rewritten_softmax_input_is_scale_observed_s(case):
    """scale_observed of a softmax input with_masks_as_neg_inf rewrote is read from the masking's
    own fit where both fit the same entries (every entry of weight 0 a fill, all finite, weights
    >= 0, float32): the least-squares factor in float64 over the finite entries, to 1e-6; elsewhere
    (a score exp() underflows on is finite with weight 0; a negative weight; bfloat16) it is
    measured, not read."""
    from attnlab.diagnosis import masking
    from attnlab.diagnosis.diagnostics import scale_observed

    n = masking.FILL_ROWS + 5
    scores = torch.randn(1, 3, n, n, generator=torch.Generator().manual_seed(8)) * 6  # (b, nh, T, T)
    if case == "underflow":
        scores[0, 2, 30, 1] = -1e5  # weight 0, and no fill: not -inf after the rewrite
    scaled = (scores * 0.125).masked_fill(~torch.ones(n, n, dtype=torch.bool).tril(), torch.finfo(torch.float32).min)
    capture = _softmax_side(scaled, scores)
    if case == "negative_weight":
        capture.stages["weights"][0, 0, 7, 1] = -0.5
    if case == "bfloat16":
        capture = _softmax_side(scaled.bfloat16(), scores.bfloat16())
    masked = masking.with_masks_as_neg_inf(capture).stages["scaled_scores"]
    scores = capture.stages["scores"]
    read = masking.fitted_scale(scores, masked)
    assert (read is not None) == (case == "fills")
    if read is not None:
        assert scale_observed(scores, masked) == read
    kept = torch.isfinite(masked) & torch.isfinite(scores)
    s, t = scores.double()[kept], masked.double()[kept]
    assert scale_observed(scores, masked) == pytest.approx(float((s * t).sum() / (s * s).sum()), rel=1e-6)
    assert masking.fitted_scale(scores.clone(), masked) is None  # other scores: measured


def test_the_far_below_bound_rounded_down_is_the_largest_value_at_or_below_it():
    """masked_fills' quick test compares the block with its far-below bound in the block's dtype: the
    bound rounded down, so that x <= it exactly when x <= the float64 bound, against nextafter in numpy."""
    from attnlab.diagnosis.masking import _rounded_down

    for bound in [-3.4e38 * 0.999, -1e9 - 0.3, -1e4 - 1e-3, -4.000001, -123456.789]:
        for dtype, np_type in ((torch.float32, np.float32), (torch.float64, np.float64)):
            at = float(_rounded_down(bound, dtype))
            assert at <= bound < float(np.nextafter(np_type(at), np_type(np.inf)))


def test_a_rewritten_softmax_input_reuses_the_memory_of_one_nothing_holds_any_more():
    """Every layer rewrites a softmax input of one size: the next one is written in the previous
    one's memory only once no tensor or slice of it is left (the values it holds stay as written)."""
    from attnlab.diagnosis import masking

    n = 40
    causal = torch.ones(n, n, dtype=torch.bool).tril()

    def rewritten(seed: int) -> tuple[torch.Tensor, torch.Tensor]:
        scores = torch.randn(1, 2, n, n, generator=torch.Generator().manual_seed(seed))  # (b, nh, T, T)
        scaled = (scores * 0.5).masked_fill(~causal, torch.finfo(torch.float32).min)
        masked = masking.with_masks_as_neg_inf(_softmax_side(scaled, scores)).stages["scaled_scores"]
        return masked, (scores * 0.5).masked_fill(~causal, -torch.inf)  # plain torch's

    first, expected_first = rewritten(1)
    kept = first[0, 1]  # a slice holds the memory
    address = first.data_ptr()
    del first
    second, expected_second = rewritten(2)
    assert second.data_ptr() != address and torch.equal(kept, expected_first[0, 1])
    address = second.data_ptr()
    del second
    third, expected_third = rewritten(3)
    assert third.data_ptr() == address and torch.equal(third, expected_third)


def test_the_peaks_read_off_the_masking_pass_are_plain_torchs():
    """max |scores| read off the masking's fit and the rewritten input's inf are remembered, not
    measured again: peaks() gives plain torch's values (finite: over the entries not at -inf)."""
    from attnlab.diagnosis import masking, stage_blocks

    n = masking.FILL_ROWS + 9
    scores = torch.randn(1, 2, n, n, generator=torch.Generator().manual_seed(4)) * 3  # (b, nh, T, T)
    scaled = (scores * 0.125).masked_fill(~torch.ones(n, n, dtype=torch.bool).tril(), torch.finfo(torch.float32).min)
    capture = masking.with_masks_as_neg_inf(_softmax_side(scaled, scores))
    masked = capture.stages["scaled_scores"]
    assert {id(scores), id(masked)} <= stage_blocks._KNOWN_MAX_ABS.keys()
    found = stage_blocks.peaks(capture)
    assert found.peak["scores"] == float(scores.abs().max()) and found.peak["scaled_scores"] == math.inf
    assert found.finite["scaled_scores"] == float(masked[torch.isfinite(masked)].abs().max())
