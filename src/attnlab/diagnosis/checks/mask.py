"""Masks (section 3.5.1): the variant's mask against the reference's, a mask the reference does
not have, and NaN/inf that no mask explains. What counts as a mask: attnlab.diagnosis.masking."""

from __future__ import annotations

import math

import torch

from attnlab.capture.stages import STAGES
from attnlab.diagnosis.context import Context, Found
from attnlab.diagnosis.finding_code import FIRST_WHERE_IT_SHOWS, Code, finds
from attnlab.record import Finding

MASK_AFTER_SOFTMAX = Code(
    "mask_after_softmax", ("weights",), "error",
    "future weights zeroed after the softmax, rows not renormalised",
    "the weights of the keys after each query are 0 but the rows sum to {low}..{high}, not 1: the mask was applied "
    "after the softmax and the rows were not renormalised; mask attn_scores with -torch.inf before the softmax (or "
    "divide each row by its sum, section 3.5.1).",
    "future weights zeroed after the softmax, rows not renormalised",
    ("causal_mask_after_softmax",), "heads")

MASK_FILL_VALUE = Code(
    "mask_fill_value", ("scaled_scores",), "error",
    "masked with a finite value whose weight is not 0, instead of -inf",
    "the hidden scaled_scores (the keys after each query) hold {fill}, a finite value, where the reference has -inf, "
    "so exp() gives future tokens weight; fill the mask with -torch.inf.",
    "masked with 0 or another finite value that leaves the hidden keys weight (a fill whose weight is exactly 0, "
    "such as -1e9, is a mask like -inf)",
    ("causal_mask_fill_zero",), "heads")

MASK_MISSING = Code(
    "mask_missing", ("scaled_scores",), "error",
    "the reference hides future tokens, the variant none",
    "the reference hides the keys after each query (-inf above the diagonal of scaled_scores) and the variant hides "
    "none, so each query attends to the tokens after it; mask attn_scores with masked_fill_(mask_bool, -torch.inf) "
    "before the softmax.",
    "the reference hides future tokens, the variant none",
    ("causal_mask_missing",), "heads")

MASK_OFFSET = Code(
    "mask_offset", ("scaled_scores",), "error",
    "the mask hides other keys than the reference's (triu's diagonal off by one)",
    {"other": "the variant's mask hides other keys than the reference's causal mask (scaled_scores -inf at other "
              "places); build it with torch.triu(torch.ones(context_length, context_length), diagonal=1){kernel}.",
     "diagonal": "the mask (the -inf in scaled_scores) is built with triu(..., diagonal={k}) where the reference uses "
                 "diagonal={ref_k}: it {what}; use diagonal={ref_k}, so each query sees itself and the tokens before "
                 "it."},
    "`triu(..., diagonal=0)` hides each token from itself; `diagonal=2` lets it see the next",
    ("causal_mask_diagonal_0", "mha_mask_diagonal_2"), "heads")

MASKED = Code(
    "masked", ("scaled_scores",), "info",
    "a mask the reference does not have (e.g. causal): not a bug, later stages differ",
    "{count} of the {total} scaled_scores are -inf: {kind}, so those attention weights are 0 and each row still sums "
    "to 1; the reference has no mask, so the weights and the context differ from the reference from here on.",
    "a mask: entries of the softmax input whose weight is exactly 0, -inf or a finite fill such as "
    "`torch.finfo(dtype).min` or -1e9 (causal when it is every key after its query), not a bug; the reference has "
    "no mask, so later stages differ",
    ("causal",), "book")

NON_FINITE = Code(
    "non_finite", FIRST_WHERE_IT_SHOWS, "error",
    "NaN or inf that no mask placed (e.g. a mask that hides every key from a query)",
    {"blind": "row {row} of {stage} is -inf for every key (a mask that hides all keys from that query), so its "
              "softmax is 0/0 = NaN; a query must keep at least one key (a causal mask keeps its own token).",
     "count": "{stage} holds {count} NaN/inf values where finite numbers were expected; look at the line that "
              "computes {stage}."},
    "NaN or inf that no mask placed, at the first stage that holds them: e.g. a mask that hides every key from a "
    "query (its softmax is 0/0)",
    ("tests/diagnosis/test_findings.py::test_a_bug_behind_a_causal_mask_is_still_found",), "book")


@finds(MASK_AFTER_SOFTMAX, MASK_FILL_VALUE, MASK_MISSING, MASK_OFFSET)


def mask_shape(ctx: Context, found: Found) -> list[Finding]:
    """The variant's mask against the reference's: missing, shifted, filled with a finite value,
    or applied to the weights after the softmax."""
    if ctx.ref_mask is None:
        return []
    mine, pattern = ctx.v.stages["scaled_scores"], ctx.ref_mask
    if not math.isfinite(ctx.v_peaks.peak["scaled_scores"]):
        if ctx.mask_pattern is not None and torch.equal(ctx.mask_pattern, pattern):
            return []  # the reference's mask
        hidden = torch.isneginf(mine)
        if hidden.any():
            return _mask_offset(ctx, hidden, pattern)
    weights = ctx.v.stages.get("weights_applied", ctx.v.stages.get("weights"))  # zeroed as multiplied
    where = pattern.expand_as(mine)
    if weights is not None and weights.shape == mine.shape:
        kept = weights[where]
        tol = ctx.tolerance("weights")
        if kept.numel() and bool((kept == 0).all()):
            sums = weights.sum(dim=-1)
            if bool(((sums - 1).abs() <= tol).all()):
                return []
            return [MASK_AFTER_SOFTMAX("weights", low=float(sums.min()), high=float(sums.max()))]
        if kept.numel() and float(kept.abs().max()) <= tol:
            return []  # filled with a value so negative that the weights are 0: the same as -inf
    filled = mine[where]
    if filled.numel() and bool((filled == filled[0]).all()) and bool(torch.isfinite(filled[0])):
        return [MASK_FILL_VALUE("scaled_scores", fill=float(filled[0]))]
    return [MASK_MISSING("scaled_scores")]


def _triu_offset(pattern: torch.Tensor) -> int | None:
    """k when the (query, key) pattern is exactly torch.triu(ones, diagonal=k), else None."""
    n_q, n_k = pattern.shape
    firsts = torch.where(pattern.any(dim=-1), pattern.int().argmax(dim=-1), -1)  # first hidden key per row
    rows = (firsts > 0).nonzero()
    if len(rows):
        r = int(rows[0])
        k = int(firsts[r]) - r
    elif pattern.all():
        k = -(n_q - 1)
    else:
        return None
    return k if torch.equal(pattern, torch.ones(n_q, n_k, dtype=torch.bool).triu(k)) else None


def _mask_offset(ctx: Context, hidden: torch.Tensor, pattern: torch.Tensor) -> list[Finding]:
    mine = hidden[0, 0]
    if torch.equal(mine, pattern) or not torch.equal(hidden, mine.expand_as(hidden)):
        return []
    k, ref_k = _triu_offset(mine), _triu_offset(pattern)
    if k is None or ref_k is None:
        kernel = ("scaled_scores" in ctx.v.reconstructed and
                  " (scaled_dot_product_attention reads a boolean mask's True as 'may attend': pass ~mask, "
                  "or is_causal=True)") or ""
        return [MASK_OFFSET("scaled_scores", "other", kernel=kernel)]
    if k < ref_k:
        what = ("hides each token from itself as well as the tokens after it (the first query sees no key "
                "at all, so its softmax is 0/0 = NaN)") if k == ref_k - 1 else "hides tokens before each query too"
    else:
        what = ("lets each query see the next token too" if k == ref_k + 1
                else f"lets each query see {k - ref_k} tokens after it")
    return [MASK_OFFSET("scaled_scores", "diagonal", k=k, ref_k=ref_k, what=what)]


@finds(MASKED)
def masked(ctx: Context, found: Found) -> list[Finding]:
    """A mask the reference does not have: deliberate (e.g. a causal variant), an info note."""
    if not ctx.mask_count or _ref_masked(ctx):
        return []  # the reference masks too: a mask difference shows as a divergence, not as a note
    scaled = ctx.v.stages["scaled_scores"]
    n_rows, n_keys = scaled.shape[-2:]
    causal = torch.ones(n_rows, n_keys, dtype=torch.bool, device=scaled.device).triu(1)
    kind = ("a causal mask (every key after its query)" if
            torch.equal(torch.isneginf(scaled), causal.expand_as(scaled)) else "a mask")
    return [MASKED("scaled_scores", count=ctx.mask_count, total=scaled.numel(), kind=kind)]


def _ref_masked(ctx: Context) -> bool:
    scaled = ctx.ref.stages.get("scaled_scores")
    return ctx.ref_mask is not None or (
        scaled is not None and not math.isfinite(ctx.ref_peaks.peak["scaled_scores"]) and bool(torch.isneginf(scaled).any()))


@finds(NON_FINITE)
def non_finite(ctx: Context, found: Found) -> list[Finding]:
    """NaN or inf that no mask placed, at the first stage that holds them."""
    if ctx.v.softmax_axis in (0, 1, 2):
        return []  # a softmax over another axis explains the NaN
    for stage in STAGES:
        count = ctx.d.get(f"non_finite_{stage}", math.nan)  # what no mask placed
        values = ctx.v.stages.get(stage)
        if count > 0 and stage in ("scores", "scaled_scores") and values is not None:
            blind = torch.isneginf(values).all(dim=-1).nonzero().tolist()  # [[batch, head, row], ...]
            if blind:
                return [NON_FINITE(stage, "blind", row=blind[0][-1], stage=stage)]
        if count > 0:
            return [NON_FINITE(stage, "count", stage=stage, count=int(count))]
    return []
