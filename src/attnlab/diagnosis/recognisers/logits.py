"""The softmax input read from the variant alone: a soft cap, a scale its config declares."""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass

import torch

from attnlab.diagnosis.context import Pair
from attnlab.diagnosis.finding_code import Code, finds
from attnlab.diagnosis.recognisers.recogniser import EPS, ROWS, each_head, recogniser
from attnlab.record import Finding

SOFTCAP = Code(
    "softcap", ("scaled_scores",), "info",
    "the softmax input is c * tanh(s / c) of the scaled scores",
    "soft-capped scores: the softmax input is {cap} * tanh(s / {cap}) of the scaled scores s, applied before the mask "
    "(the masked entries stay -inf), so no score reaches +-{cap} and large scores are squashed the most; the weights "
    "and context differ from the reference's from here on.",
    "the softmax input is c·tanh(s/c) of the variant's own scaled scores (its scores times its scale), before the "
    "mask; reports c",
    ("softcap",), "deliberate")

DECLARED_SCALE = Code(
    "declared_scale", ("scaled_scores",), "info",
    "the scores scaled as the module's config declares (query_pre_attn_scalar), not 1/sqrt(head_dim)",
    "the scores are scaled by {factor} as the module's config declares ({where}), not by 1/sqrt(head_dim) = {usual}; "
    "deliberate, so the weights and context differ from the reference's from here on.",
    "the scores scaled by the factor the module's config declares (Gemma's `query_pre_attn_scalar`) instead of "
    "1/sqrt(head_dim), alone or under a soft cap; a factor no config declares stays a `scaling` error",
    ("tests/modules/test_hf_modules.py::test_gemma2s_soft_cap_window_scale_rope_and_grouping_are_each_named",),
    "deliberate")


def _cap_through(score: float, capped: float) -> float | None:
    """The c with c * tanh(score / c) == capped (c * tanh(s / c) grows with c from 0 towards s)."""
    if score == 0 or capped == 0 or (score > 0) != (capped > 0) or abs(capped) >= abs(score):
        return None
    s, t = abs(score), abs(capped)
    lo, hi = t, 2 * t
    while hi * math.tanh(s / hi) < t and hi < 1e12:
        hi *= 2
    for _ in range(200):
        mid = math.sqrt(lo * hi)
        lo, hi = (mid, hi) if mid * math.tanh(s / mid) < t else (lo, mid)
    return math.sqrt(lo * hi)


def _own_logits(p: Pair) -> Iterator[tuple[torch.Tensor, torch.Tensor]] | None:
    """The variant's own scores and softmax input (float64) over the entries it does not mask
    (finite; every mask is -inf by now, attnlab.diagnosis.masking), a few rows of one head at a
    time so that no copy of a stage is made. Read from the variant alone, so a scale or a cap is
    seen whatever changed the scores before (RoPE, QK-norm)."""
    scores, scaled = p.v.stages.get("scores"), p.v.stages.get("scaled_scores")
    if scores is None or scaled is None or scores.shape != scaled.shape or scaled.dim() != 4:
        return None
    rows = [(*i, slice(start, start + ROWS)) for i in each_head(scaled) for start in range(0, scaled.shape[2], ROWS)]
    return ((scores[i][kept].double(), scaled[i][kept].double())
            for i in rows if (kept := torch.isfinite(scaled[i])).any())


@dataclass(frozen=True)
class _Bend:
    """How the softmax input departs from scale * scores: the largest |scale * score|, the largest
    departure, and the (scale * score, softmax input) pair at that largest score."""
    largest: float
    departure: float
    score: float
    logit: float


def _bend(p: Pair, scale: float) -> _Bend | None:
    heads = _own_logits(p)
    if heads is None:
        return None
    largest, departure, at = -1.0, 0.0, (0.0, 0.0)
    for scores, logits in heads:
        pre = scale * scores  # (n,) the entries of a few rows of one head that the variant does not mask
        departure = max(departure, float((logits - pre).abs().max()))
        j = int(pre.abs().argmax())
        if abs(float(pre[j])) > largest:
            largest, at = abs(float(pre[j])), (float(pre[j]), float(logits[j]))
    return _Bend(largest, departure, *at) if largest >= 0 else None


def _cap(p: Pair, scale: float) -> float | None:
    """The cap c with the variant's softmax input = c * tanh(scale * scores / c), when one fits."""
    bend = _bend(p, scale)
    if bend is None:
        return None
    tol = 64 * EPS * bend.largest  # relative to the scores: small scores are bent little, but bent
    if bend.departure <= tol:
        return None  # nothing capped
    cap, heads = _cap_through(bend.score, bend.logit), _own_logits(p)
    if cap is None or heads is None or any(float((cap * torch.tanh(scale * scores / cap) - logits).abs().max()) > tol
                                           for scores, logits in heads):
        return None
    return cap


def _scales(p: Pair) -> tuple[float, float] | None:
    """(the variant's declared or else the usual 1/sqrt(head_dim) factor, the usual one)."""
    keys = p.v.stages.get("keys")
    if keys is None:
        return None
    usual = keys.shape[-1] ** -0.5
    return (p.v.declared_scale[0] if p.v.declared_scale else usual), usual


@finds(SOFTCAP)
@recogniser
def softcap(p: Pair) -> list[Finding]:
    scales = _scales(p) if p.changed("scaled_scores") else None
    cap = _cap(p, scales[0]) if scales else None
    if cap is None:
        return []
    return [SOFTCAP("scaled_scores", cap=float(cap))]


@finds(DECLARED_SCALE)
@recogniser
def declared_scale(p: Pair) -> list[Finding]:
    """A scale the module's config declares (Gemma's query_pre_attn_scalar), seen in the softmax
    input, alone or under a soft cap: deliberate, an info finding, never a `scaling` error."""
    declared = p.v.declared_scale
    scales = _scales(p) if declared is not None else None
    if declared is None or scales is None:
        return []
    (factor, where), usual = declared, scales[1]
    theirs = p.ref.declared_scale[0] if p.ref.declared_scale else usual
    if abs(factor - theirs) <= 1e-6 * theirs:
        return []  # the reference scales the same way (Gemma's eager against its own sdpa)
    bend = _bend(p, factor)
    if bend is None:
        return []
    plain = bend.departure <= 64 * EPS * max(bend.largest, 1.0)
    if not plain and _cap(p, factor) is None:
        return []
    return [DECLARED_SCALE("scaled_scores", factor=float(factor), where=where, usual=float(usual))]
