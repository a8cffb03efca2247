"""Rows and batch items: each token's row against its own single-token computation (the source's
check for token 2, for every token), and each batch item alone against its slice of the batch."""

from __future__ import annotations

import math

from attnlab.diagnosis.context import Context, Found
from attnlab.diagnosis.finding_code import FIRST_WHERE_IT_SHOWS, Code, finds
from attnlab.diagnosis.message_format import items
from attnlab.record import Finding

BATCHED_SINGLE_MISMATCH = Code(
    "batched_single_mismatch", ("context",), "error",
    "row i of the batched context is not token i's own computation, and nothing earlier explains it",
    "row i of the batched context differs from token i's single-token computation softmax(q_i K^T / sqrt(d_k)) V "
    "by up to {diff}; predict the shapes and values, then check stage by stage from the scores on.",
    "row i of the batched context is not the single-token computation for token i (the source's check for token 2, "
    "done for every token, from the variant's own softmax input, mask included), and nothing earlier explains it",
    ("tests/diagnosis/test_codes.py::test_a_row_that_is_not_its_own_computation_is_batched_single_mismatch",),
    "book")

BATCH_MIXING = Code(
    "batch_mixing", FIRST_WHERE_IT_SHOWS, "error",
    "a batch item's result depends on the other items of its batch",
    "batch {which}, run alone, give{s} other {stage} than {slices} of the batched run (by up to {diff}): a batch "
    "item's result depends on the other items (a mean, sum or softmax over dim 0, the batch axis, or keys taken "
    "from another item); reduce over the tokens or features only.",
    "a batch item's result depends on the other items: each item is run alone and compared with its slice (eval "
    "mode; with equal items, as the book's stacked inputs, it says \"batch mixing not checked: the batch items are "
    "equal; use inputs=random\"). `causal_batch_centred_keys` shows it with `inputs=random` (on the book's equal "
    "items its centred keys are all zero: `key_index @ keys`)",
    ("causal_batch_centred_keys",), "heads", explains=False)


@finds(BATCHED_SINGLE_MISMATCH)
def batched_single(ctx: Context, found: Found) -> list[Finding]:
    diff = ctx.d.get("batched_single_max_abs_diff", math.nan)
    if found.findings or not ctx.judged("context") or math.isnan(diff):  # nan: no context
        return []
    if not diff > ctx.tolerance("context", ctx.v):
        return []
    return [BATCHED_SINGLE_MISMATCH("context", diff=diff)]


@finds(BATCH_MIXING)
def batch_mixing(ctx: Context, found: Found) -> list[Finding]:
    m = ctx.mixing
    if m is None or m.stage is None:
        return []
    if any(f.stage == m.stage and f.severity == "error" for f in found.findings):
        return []  # e.g. a softmax over the batch axis: named at that stage already
    one = len(m.items) == 1
    return [BATCH_MIXING(m.stage, which=f"item {m.items[0]}" if one else f"items {items(m.items)}",
                         s="s" if one else "", stage=m.stage, slices="its slice" if one else "their slices",
                         diff=m.max_abs_diff, batch=list(m.items))]
