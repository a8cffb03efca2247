"""Cosine-similarity attention (x-transformers' qk_norm, Swin v2): queries and keys divided by
their length per head, so each score is a cosine in [-1, 1] and the scale is a temperature the
module chooses, not 1/sqrt(head_dim)."""

from __future__ import annotations

import torch

from attnlab.diagnosis.context import Pair
from attnlab.diagnosis.finding_code import Code, finds
from attnlab.diagnosis.message_format import fmt
from attnlab.diagnosis.recognisers.recogniser import UNIT_RMS, recogniser
from attnlab.diagnosis.recognisers.rotation import fit_rotation
from attnlab.record import Finding

COSINE_ATTENTION = Code(
    "cosine_attention", ("queries",), "info",
    "queries and keys divided by their length per head: scores are cosines, scaled by a chosen temperature",
    "cosine-similarity attention: each head's query and key vectors are divided by their length before queries @ "
    "keys.T, so every attn_score is a cosine in [-1, 1], then scaled {temperature} (a temperature the module chooses, "
    "not 1/sqrt(head_dim)); the scores, weights and context differ from the reference's from here on.",
    "cosine-similarity attention (x-transformers' `qk_norm`, Swin v2): each head's query and key vectors divided by "
    "their length, so the scores are cosines; the scale is then a temperature the module chooses, named with its "
    "value, never a `scaling` error",
    ("tests/diagnosis/test_cosine.py::test_cosine_similarity_attention_is_named_with_its_temperature",), "deliberate")


@finds(COSINE_ATTENTION)
@recogniser
def cosine_attention(p: Pair) -> list[Finding]:
    pairs = [pair for stage in ("queries", "keys") if (pair := p.both(stage)) is not None]
    if len(pairs) != 2 or not p.changed("queries"):
        return []
    if not all(unit_length_of(mine, ref, p.tolerance(stage)) for (mine, ref), stage in zip(pairs, ("queries", "keys"))):
        return []
    scale = p.diagnostics.get("scale_observed")
    temperature = f"by {fmt(scale)}" if scale is not None and scale == scale else "by the module's own factor"
    return [COSINE_ATTENTION("queries", temperature=temperature)]


def unit_length_of(mine: torch.Tensor, ref: torch.Tensor, tol: float) -> bool:
    """`mine` is `ref` with each vector divided by its length (then perhaps rotated by position)."""
    if (mine.double().norm(dim=-1) - 1).abs().max() > UNIT_RMS:
        return False
    ref = ref.double()
    unit = ref / ref.norm(dim=-1, keepdim=True).clamp_min(1e-12)  # (b, h, t, hs)
    tol = UNIT_RMS + tol / float(ref.norm(dim=-1).min().clamp_min(1e-12))
    return bool((unit - mine.double()).abs().max() <= tol) or fit_rotation(mine, unit, tol) is not None
