"""The softmax over the keys (section 3.3.1), and dropout on its output (section 3.5.2)."""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from attnlab.diagnosis.context import Context, Found
from attnlab.diagnosis.finding_code import Code, finds
from attnlab.diagnosis.message_format import fmt
from attnlab.diagnosis.recognisers import linear_attention
from attnlab.record import Finding

DROPOUT_RTOL = 1e-3

SOFTMAX_AXIS = Code(
    "softmax_axis", ("weights",), "error",
    "the softmax ran over the queries, the heads or the batch, not the keys",
    {"queries": "weight columns sum to 1 but rows do not: the softmax normalised over the queries (dim {dim}) "
                "instead of the keys; use dim=-1 so each query's weights sum to 1.",
     "other": "the softmax normalised over {over} (dim {dim}) instead of the keys, so each query's weights do not "
              "sum to 1{nan}; use dim=-1."},
    "the softmax ran over the queries (`dim=-2`: columns sum to 1 and rows do not), the heads or the batch, not the "
    "keys; also when a causal mask turns it into 0/0 = NaN",
    ("wrong_softmax_axis", "mha_softmax_query_axis", "mha_softmax_head_axis"), "book")

NOT_SOFTMAX = Code(
    "not_softmax", ("weights",), "error",
    "the weights are not a softmax (a plain normalisation, linear attention)",
    {"normalised": "weight {rows}, but the weights are not the softmax of the scaled scores (off by up to {err}); use "
                   "torch.softmax(scaled scores, dim=-1) instead of a plain normalisation.",
     "linear": "the weights are not a softmax of the scaled scores: the context is linear attention's, weights "
               "phi(q_i) . phi(k_j) over the keys j <= i with phi = {phi}, {rows}; the module never makes the weights "
               "(running sums over the tokens), so they cannot be shown. Deliberate in linear attention; use "
               "torch.softmax(attn_scores / keys.shape[-1] ** 0.5, dim=-1) for the reference's attention."},
    "rows sum to 1 but the weights are not a softmax (plain normalisation); for linear attention, which never makes "
    "its weights, says what they are instead (a non-negative kernel, normalised per row or not)",
    ("plain_normalisation", "linear_attention"), "book")

NO_SOFTMAX = Code(
    "no_softmax", ("weights",), "info",
    "the library's class computes no softmax: an approximation by design (YOSO's LSH expectation)",
    "the weights are not a softmax of the scaled scores, and {cls}, the library's class, computes none (its code and "
    "the functions it calls name no softmax: an approximation of attention by design); deliberate, so the weights "
    "and context differ from the reference's from here on.",
    "the weights are not a softmax where the library's class the module comes from computes none (its code and the "
    "helpers of its modeling file it calls name no softmax, YOSO's LSH expectation); read from the library's class, "
    "so a copy of a softmax class that drops its softmax is still `not_softmax`",
    ("tests/modules/test_hf_lineage.py::test_an_attention_without_a_softmax_by_design_is_declared",), "deliberate")

DROPOUT = Code(
    "dropout", ("weights_applied",), "info",
    "train=true: dropout, with the rate it estimates",
    "dropout is active (train=true): {share}% of the attention weights as applied to the values (weights_applied) "
    "were zeroed and the rest multiplied by {factor} = 1/(1 - p), an estimated rate p = {rate}; the stages after it "
    "differ from the reference by chance.",
    "`train=true`: dropout, with the rate it estimates (`multi_head_attention train=true dropout=0.5`)",
    ("tests/diagnosis/test_findings_multi_head.py::test_dropout_in_training_is_a_note_with_its_rate",), "heads")

DROPOUT_ACTIVE = Code(
    "dropout_active", ("weights_applied",), "error",
    "an eval-mode run whose applied weights show dropout",
    "the run is in eval mode, yet {share}% of the attention weights as applied to the values (weights_applied) were "
    "zeroed and the rest multiplied by {factor} = 1/(1 - p) with p = {rate}: dropout is still on; use self.dropout = "
    "nn.Dropout(dropout), which .eval() turns off, or F.dropout(..., training=self.training) instead of "
    "training=True.",
    "an eval-mode run whose applied weights show dropout (zeros, the rest scaled by 1/(1-p))",
    ("causal_dropout_always",), "heads")


@finds(SOFTMAX_AXIS, NOT_SOFTMAX, NO_SOFTMAX)
def softmax(ctx: Context, found: Found) -> list[Finding]:
    """The softmax's axis, and weights that are not a softmax (a plain normalisation, linear attention)
    but where the library's class computes none."""
    findings = _softmax(ctx)
    if ctx.v.no_softmax is None or not any(f.code == "not_softmax" for f in findings):
        return findings
    return [NO_SOFTMAX("weights", cls=ctx.v.no_softmax)]


def _softmax(ctx: Context) -> list[Finding]:
    if not ctx.present("weights"):
        kernel = linear_attention(ctx.pair)
        return [] if kernel is None else [NOT_SOFTMAX("weights", "linear", phi=kernel[0], rows=kernel[1])]
    tol = ctx.tolerance("weights", ctx.v)
    row_err = ctx.d.get("weights_row_sum_max_err", math.nan)
    col_err = ctx.d.get("weights_col_sum_max_err", math.nan)
    weights = ctx.v.stages["weights"]
    square = weights.shape[-1] == weights.shape[-2]
    axis, dim = ctx.v.softmax_axis, ctx.v.softmax_dim
    if axis == 2 or (axis is None and square and col_err <= tol < row_err):
        return [SOFTMAX_AXIS("weights", "queries", dim=dim if dim is not None else 0)]
    if axis in (0, 1):
        over = "the batch items" if axis == 0 else "the heads"
        nan = ""
        if ctx.ref_mask is not None and bool(torch.isnan(weights).any()):
            nan = (f"; under the causal mask a hidden entry is -inf in every one of {over}, so its softmax "
                   f"is 0/0 = NaN")
        return [SOFTMAX_AXIS("weights", "other", over=over, dim=dim, nan=nan)]
    softmax_err = ctx.d.get("weights_softmax_max_err", math.nan)
    if not softmax_err > tol:
        return []
    rows = "rows sum to 1" if row_err <= tol else f"rows sum to 1 within {fmt(row_err)}"
    return [NOT_SOFTMAX("weights", "normalised", rows=rows, err=softmax_err)]


@finds(DROPOUT, DROPOUT_ACTIVE)
def dropout(ctx: Context, found: Found) -> list[Finding]:
    """weights_applied = weights with zeros, the rest scaled by one factor 1/(1-p): dropout."""
    drawn = dropout_drawn(ctx)
    if drawn is None or drawn.factor <= 1:
        return []
    rate = 1 - 1 / drawn.factor
    return [(DROPOUT if ctx.train else DROPOUT_ACTIVE)("weights_applied", share=100 * drawn.share,
                                                       factor=drawn.factor, rate=rate)]


@dataclass(frozen=True)
class Drawn:
    """What a dropout did to the weights as applied to the values."""

    dropped: torch.Tensor  # (b, nh, query, key) True where a non-zero weight was zeroed
    share: float  # of the non-zero weights, the part zeroed
    factor: float  # what every kept weight was multiplied by
    row_sum: float  # what a query's weights as applied sum to, on average


def dropout_drawn(ctx: Context) -> Drawn | None:
    """weights_applied as the weights with some zeroed and every other one multiplied by one factor."""
    applied, weights = ctx.v.stages.get("weights_applied"), ctx.v.stages.get("weights")
    if applied is None or weights is None or applied.shape != weights.shape:
        return None
    kept = applied != 0
    dropped = ~kept & (weights != 0)
    if not dropped.any() or not kept.any():
        return None
    ratio = applied[kept] / weights[kept]
    factor = float(ratio.mean())
    if not bool(((ratio - factor).abs() <= DROPOUT_RTOL * factor).all()):
        return None
    share = float(dropped.sum()) / float((weights != 0).sum())
    return Drawn(dropped, share, factor, float(applied.sum(dim=-1).mean()))
