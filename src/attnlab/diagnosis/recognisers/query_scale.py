"""Queries multiplied per column by a learned vector before the score product (TimesFM's per-dimension
scaling, `softplus(scaling) * 1.442695 / sqrt(head_dim)`), the keys left as they are: each query
column is the reference's times one positive factor, the same for every batch item, head and token.

Only the queries are forgiven: the factor is not the softmax's scale, so what the class passes to its
softmax is still checked against what it declares (`scaling`), and queries from another projection or
another token fit no per-column factor."""

from __future__ import annotations

import torch

from attnlab.diagnosis.context import Pair
from attnlab.diagnosis.finding_code import Code, finds
from attnlab.diagnosis.recognisers.recogniser import EPS, recogniser
from attnlab.record import Finding

_UNCHANGED = 1e-4  # factors this close to 1: the queries are the reference's

QUERY_SCALE = Code(
    "query_scale", ("queries",), "info",
    "queries multiplied per column by a learned positive vector before the score product (TimesFM)",
    "the queries are the reference's multiplied per column by a learned positive vector ({factors}; the same for "
    "every batch item, head and token, TimesFM's per-dimension scaling), the keys left as they are; deliberate, so "
    "the scores, weights and context differ from the reference's from here on, while the factor the softmax input is "
    "scaled by is still checked.",
    "queries multiplied per column (head dimension) by one positive factor each, the same for every batch item, head "
    "and token, the keys unchanged: a learned per-dimension query scale (TimesFM's). Reports the factors; the "
    "softmax input's own scale is still checked against what the class declares",
    ("tests/diagnosis/test_query_scale.py::test_timesfm_per_dimension_query_scale_is_named_not_a_query_source",),
    "deliberate")


def column_factors(mine: torch.Tensor, ref: torch.Tensor, tol: float) -> torch.Tensor | None:
    """The factors s (head_dim,) with mine = ref * s for (b, heads, tokens, head_dim) queries, fitted
    in float64 column by column; None when no such positive factors fit or they are all 1."""
    x, y = ref.double().flatten(0, 2), mine.double().flatten(0, 2)  # (samples, head_dim)
    power = (x * x).sum(0)  # (head_dim,)
    if x.shape[0] < 2 or bool((power == 0).any()):
        return None
    factors = (x * y).sum(0) / power  # (head_dim,)
    bound = tol + 4 * EPS * float(y.abs().max())
    if float((x * factors - y).abs().max()) > bound or not bool((factors > 0).all()):
        return None
    return None if float((factors - 1).abs().max()) <= _UNCHANGED else factors


@finds(QUERY_SCALE)
@recogniser
def query_scale(p: Pair) -> list[Finding]:
    queries, keys = p.both("queries"), p.both("keys")
    if queries is None or keys is None or queries[0].dim() != 4 or not p.changed("queries") or p.changed("keys"):
        return []
    factors = column_factors(*queries, p.tolerance("queries"))
    if factors is None:
        return []
    lo, hi = float(factors.min()), float(factors.max())
    shown = f"{lo:.4g} on every column" if hi - lo <= _UNCHANGED * hi else f"{lo:.4g} to {hi:.4g} over the columns"
    return [QUERY_SCALE("queries", factors=shown)]
