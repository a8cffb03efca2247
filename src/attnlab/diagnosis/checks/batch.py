"""Rows and batch items: each token's row against its own single-token computation (the source's
check for token 2, for every token), and each batch item alone against its slice of the batch."""

from __future__ import annotations

import math

from attnlab.diagnosis.context import Context, Found, finding
from attnlab.diagnosis.message_format import fmt, items
from attnlab.record import Finding


def batched_single(ctx: Context, found: Found) -> list[Finding]:
    diff = ctx.d.get("batched_single_max_abs_diff", math.nan)
    if found.findings or not ctx.judged("context") or math.isnan(diff):  # nan: no context
        return []
    if not diff > ctx.tolerance("context", ctx.v):
        return []
    return [finding("batched_single_mismatch", "context", f"row i of the batched context differs from token i's "
                    f"single-token computation softmax(q_i K^T / sqrt(d_k)) V by up to {fmt(diff)}; predict the "
                    f"shapes and values, then check stage by stage from the scores on.")]


def batch_mixing(ctx: Context, found: Found) -> list[Finding]:
    m = ctx.mixing
    if m is None or m.stage is None:
        return []
    if any(f.stage == m.stage and f.severity == "error" for f in found.findings):
        return []  # e.g. a softmax over the batch axis: named at that stage already
    which = f"item {m.items[0]}" if len(m.items) == 1 else f"items {items(m.items)}"
    return [finding("batch_mixing", m.stage, f"batch {which}, run alone, give{'s' if len(m.items) == 1 else ''} "
                    f"other {m.stage} than {'its slice' if len(m.items) == 1 else 'their slices'} of the batched run "
                    f"(by up to {fmt(m.max_abs_diff)}): a batch item's result depends on the other items (a mean, "
                    f"sum or softmax over dim 0, the batch axis, or keys taken from another item); reduce over the "
                    f"tokens or features only.", batch=list(m.items))]
