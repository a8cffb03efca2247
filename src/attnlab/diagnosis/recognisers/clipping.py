"""Queries, keys and values clamped to a bound the module's config declares (OLMo's clip_qkv):
deliberate, so named as info rather than read as a wrong query source."""

from __future__ import annotations

import torch

from attnlab.diagnosis.context import Pair
from attnlab.diagnosis.finding_code import Code, finds
from attnlab.diagnosis.recognisers.recogniser import recogniser
from attnlab.diagnosis.recognisers.rotation import fit_rotation, turned
from attnlab.record import Finding

_STAGES = ("queries", "keys", "values")

CLIPPED_QKV = Code(
    "clipped_qkv", ("queries",), "info",
    "queries, keys and values clamped to the bound the module's config declares (OLMo's clip_qkv)",
    "queries, keys and values are clamped to +-{bound} as the module's config declares ({where}): {count} projected "
    "entries lay beyond it{then}; deliberate, so the scores, weights and context differ from the reference's from "
    "here on.",
    "queries, keys and values clamped to the bound the module's config declares (OLMo's and OLMoE's `clip_qkv`), then "
    "perhaps rotated (RoPE): names the bound and how many projected entries lay beyond it. A clamp to another bound "
    "than the declared one is not named: the source checks report it",
    ("tests/diagnosis/test_clipping.py::test_olmo_s_declared_clip_is_named_not_a_query_source",), "deliberate")


@finds(CLIPPED_QKV)

@recogniser
def clipped_qkv(p: Pair) -> list[Finding]:
    if p.v.declared_clip is None or p.ref.declared_clip == p.v.declared_clip:
        return []
    bound, where = p.v.declared_clip
    pairs = {stage: pair for stage in _STAGES if (pair := p.both(stage)) is not None}
    if len(pairs) != len(_STAGES) or not any(p.changed(stage) for stage in _STAGES):
        return []
    clipped = {stage: ref.clamp(-bound, bound) for stage, (_, ref) in pairs.items()}  # the projections as clamped
    if not _equal(pairs["values"][0], clipped["values"], p.tolerance("values")):
        return []
    rotation = None
    for stage in ("queries", "keys"):
        mine, tol = pairs[stage][0], p.tolerance(stage)
        if _equal(mine, clipped[stage], tol):
            continue
        rotation = fit_rotation(mine, clipped[stage], 4 * tol)  # clamped first, then turned by position (RoPE)
        if rotation is None:
            return []
    count = sum(int((ref.abs() > bound).sum()) for _, ref in pairs.values())
    then = f", then {turned(rotation, pairs['queries'][1].shape[-1])}" if rotation is not None else ""
    return [CLIPPED_QKV("queries", bound=float(bound), where=where, count=count, then=then)]


def _equal(mine: torch.Tensor, expected: torch.Tensor, tol: float) -> bool:
    return bool((mine.double() - expected.double()).abs().max() <= tol)
