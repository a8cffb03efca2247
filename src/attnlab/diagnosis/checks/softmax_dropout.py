"""The softmax over the keys (section 3.3.1), and dropout on its output (section 3.5.2)."""

from __future__ import annotations

import math

import torch

from attnlab.diagnosis.context import Context, Found, finding
from attnlab.diagnosis.message_format import fmt
from attnlab.diagnosis.recognisers import linear_attention
from attnlab.record import Finding

DROPOUT_RTOL = 1e-3


def softmax(ctx: Context, found: Found) -> list[Finding]:
    """The softmax's axis, and weights that are not a softmax (a plain normalisation, linear attention)."""
    if not ctx.present("weights"):
        return linear_attention(ctx.pair)
    tol = ctx.tolerance("weights", ctx.v)
    row_err = ctx.d.get("weights_row_sum_max_err", math.nan)
    col_err = ctx.d.get("weights_col_sum_max_err", math.nan)
    weights = ctx.v.stages["weights"]
    square = weights.shape[-1] == weights.shape[-2]
    axis, dim = ctx.v.softmax_axis, ctx.v.softmax_dim
    if axis == 2 or (axis is None and square and col_err <= tol < row_err):
        return [finding("softmax_axis", "weights", f"weight columns sum to 1 but rows do not: the softmax normalised "
                        f"over the queries (dim {dim if dim is not None else 0}) instead of the keys; use dim=-1 so "
                        f"each query's weights sum to 1.")]
    if axis in (0, 1):
        over = "the batch items" if axis == 0 else "the heads"
        nan = ""
        if ctx.ref_mask is not None and bool(torch.isnan(weights).any()):
            nan = (f"; under the causal mask a hidden entry is -inf in every one of {over}, so its softmax "
                   f"is 0/0 = NaN")
        return [finding("softmax_axis", "weights", f"the softmax normalised over {over} (dim {dim}) instead of the "
                        f"keys, so each query's weights do not sum to 1{nan}; use dim=-1.")]
    softmax_err = ctx.d.get("weights_softmax_max_err", math.nan)
    if not softmax_err > tol:
        return []
    rows = "rows sum to 1" if row_err <= tol else f"rows sum to 1 within {fmt(row_err)}"
    return [finding("not_softmax", "weights", f"weight {rows}, but the weights are not the softmax of the scaled "
                    f"scores (off by up to {fmt(softmax_err)}); use torch.softmax(scaled scores, dim=-1) "
                    f"instead of a plain normalisation.")]


def dropout(ctx: Context, found: Found) -> list[Finding]:
    """weights_applied = weights with zeros, the rest scaled by one factor 1/(1-p): dropout."""
    applied, weights = ctx.v.stages.get("weights_applied"), ctx.v.stages.get("weights")
    if applied is None or weights is None or applied.shape != weights.shape:
        return []
    kept = applied != 0
    dropped = ~kept & (weights != 0)
    if not dropped.any() or not kept.any():
        return []
    ratio = applied[kept] / weights[kept]
    factor = float(ratio.mean())
    if not bool(((ratio - factor).abs() <= DROPOUT_RTOL * factor).all()) or factor <= 1:
        return []
    share = float(dropped.sum()) / float((weights != 0).sum())
    rate = 1 - 1 / factor
    if ctx.train:
        return [finding("dropout", "weights_applied", f"dropout is active (train=true): {fmt(100 * share)}% of the "
                        f"attention weights as applied to the values (weights_applied) were zeroed and the rest "
                        f"multiplied by {fmt(factor)} = 1/(1 - p), an estimated rate p = {fmt(rate)}; the stages "
                        f"after it differ from the reference by chance.")]
    return [finding("dropout_active", "weights_applied", f"the run is in eval mode, yet {fmt(100 * share)}% of the "
                    f"attention weights as applied to the values (weights_applied) were zeroed and the rest "
                    f"multiplied by {fmt(factor)} = 1/(1 - p) with p = {fmt(rate)}: dropout is still on; use "
                    f"self.dropout = nn.Dropout(dropout), which .eval() turns off, or F.dropout(..., "
                    f"training=self.training) instead of training=True.")]
