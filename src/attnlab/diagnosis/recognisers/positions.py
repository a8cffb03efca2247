"""Rotary positions and normalised queries and keys, named from the query and key stages."""

from __future__ import annotations

import dataclasses

import torch

from attnlab.diagnosis.context import Pair
from attnlab.diagnosis.finding_code import Code, finds
from attnlab.diagnosis.message_format import fmt
from attnlab.diagnosis.recognisers.norms import (
    PER_HEAD,
    PER_HEAD_LAYER,
    WHOLE_WIDTH,
    WHOLE_WIDTH_LAYER,
    norms,
    rotation_maybe_normed,
    token_maps_maybe_normed,
    unit_rms_of,
)
from attnlab.diagnosis.recognisers.recogniser import recogniser
from attnlab.diagnosis.recognisers.rotation import Rotation, fit_rotation, reversed_turn, turned
from attnlab.diagnosis.recognisers.token_maps import mapped
from attnlab.record import Finding

_SAME_SCALE = 1e-3  # queries' and keys' scales apart by more: not one attention factor on cos and sin
_FROM_HERE_ON = "the scores, weights and context differ from the reference's from here on."

ROTARY = Code(
    "rotary", ("queries",), "info",
    "queries and keys rotated per position (RoPE); names the pairing and the base",
    {"variant": "rotary position embedding (RoPE): queries and keys are {what}; each token's query and key {kept}, "
                "so attn_scores depend on the query-key distance, and " + _FROM_HERE_ON,
     "tokens": "rotary position embedding by the token's place: queries and keys are {what}; each token's query and "
               "key are mapped alike, so attn_scores depend on both tokens' positions, and " + _FROM_HERE_ON,
     "reference": "the reference applies a rotary position embedding (RoPE) that the variant does not: the "
                  "reference's queries and keys are {theirs}, the variant's are not rotated, so its attn_scores do "
                  "not depend on the query-key distance as the reference's do; " + _FROM_HERE_ON},
    "queries and keys rotated per position: per-token norms equal the reference's (or all one factor times them: cos "
    "and sin scaled, as longrope and YaRN do; the factor is named), the angle linear in the position; reports the "
    "pairing (half-split or interleaved) and the base, fitted as one geometric sequence on the pairs whose angle "
    "shows, so a base of 1e6 is read right at 8 tokens although its slowest pairs turn below float32's rounding; "
    "trailing coordinates are a partial RoPE only where that sequence would have turned them visibly; slow pairs "
    "rescaled (llama3, YaRN) are named after the base of the fast ones; angles not linear in the token's index (2-D "
    "and 3-D RoPE over patches, a class token left unrotated) are read as one 2x2 matrix per token and pair, the "
    "same in every batch item and head and for the keys as for the queries",
    ("rope",), "deliberate")

ROTARY_MISAPPLIED = Code(
    "rotary_misapplied", ("queries", "keys", "values"), "error",
    "RoPE applied to the values too, or to the queries and not the keys",
    {"one_side": "the {rotated} are {what}, but the {other} are not: rotate queries and keys with the same angles, so "
                 "that each score depends only on the distance between its query and key tokens.",
     "other_angles": "the queries are {what}, but the keys are turned by other angles ({keys_turn}); rotate both "
                     "with the same angles.",
     "values": "the values are rotated by position like the queries and keys ({pairing}); RoPE rotates only queries "
               "and keys: compute the values as x @ W_value, unrotated."},
    "RoPE applied to the values too, or to the queries but not the keys (or the keys by other angles)",
    ("tests/diagnosis/test_recognisers.py::test_rope_on_the_values_too_is_an_error_at_the_values",), "deliberate")

QK_NORM = Code(
    "qk_norm", ("queries",), "info",
    "queries and keys have unit RMS per head before the product",
    "{what}{values}; " + _FROM_HERE_ON,
    "queries and keys have unit RMS per head before the product (or are normalised as LayerNorm does, or over the "
    "whole projection as OLMo 2 does); the values normalised too are said beside it",
    ("qk_norm",), "deliberate")


@finds(ROTARY, ROTARY_MISAPPLIED)
@recogniser
def rotary(p: Pair) -> list[Finding]:
    queries, keys = p.both("queries"), p.both("keys")
    if queries is None or keys is None:
        return []
    changed = {stage: p.changed(stage) for stage in ("queries", "keys", "values") if p.both(stage) is not None}
    if not (changed["queries"] or changed["keys"]):
        return []
    turns = {stage: rotation_maybe_normed(*pair, 4 * p.tolerance(stage)) if changed[stage] else None
             for stage, pair in (("queries", queries), ("keys", keys))}
    found = {stage: turn for stage, turn in turns.items() if turn is not None}
    rotated = list(found)
    if not rotated:
        return _by_token(p, queries, keys, changed)
    turn = found[rotated[0]]
    head_dim = queries[1].shape[-1]
    what = turned(turn, head_dim)
    if len(rotated) == 1:
        other = "keys" if rotated == ["queries"] else "queries"
        if changed[other]:
            return []  # the other one changed some other way: not a rotation this can name
        return [ROTARY_MISAPPLIED(other, "one_side", rotated=rotated[0], what=what, other=other)]
    keys_turn = found["keys"]
    joint = turn if _same(turn, keys_turn) else _together(p, queries, keys)
    if joint is None and abs(keys_turn.scale / turn.scale - 1) > _SAME_SCALE:
        if turn.normed and keys_turn.normed and _same(turn, dataclasses.replace(keys_turn, scale=turn.scale)):
            what = turned(dataclasses.replace(turn, scale=1.0), head_dim)
            return [ROTARY("queries", "variant", what=what, kept=_factors(turn.scale, keys_turn.scale))]
        return []  # one of them rescaled beyond the rotation: a wrong projection, left to the source checks
    if joint is None:
        return [ROTARY_MISAPPLIED("keys", "other_angles", what=what, keys_turn=turned(keys_turn, head_dim))]
    turn, what = joint, turned(joint, head_dim)
    values = p.both("values")
    # values wrong some other way are left to the value-path check: the rotation is still named
    if changed.get("values") and values is not None and fit_rotation(*values, 4 * p.tolerance("values")) is not None:
        return [ROTARY_MISAPPLIED("values", "values", pairing=turn.pairing)]
    if float(turn.frequencies.max()) < 0:  # the reference's are the turned ones
        theirs = turned(reversed_turn(turn), head_dim)
        return [ROTARY("queries", "reference", theirs=theirs)]
    kept = "keep their length" if turn.scale == 1 else f"keep their length times {fmt(turn.scale)}"
    return [ROTARY("queries", "variant", what=what, kept=kept)]


def _by_token(p: Pair, queries: tuple[torch.Tensor, torch.Tensor], keys: tuple[torch.Tensor, torch.Tensor],
              changed: dict[str, bool]) -> list[Finding]:
    """Queries and keys mapped per token by the same matrices, angles not linear in the index (2-D
    RoPE over patches, a class token unrotated), perhaps after a QK-norm; values changed too are left to the checks."""
    if changed.get("values") or not (changed["queries"] and changed["keys"]):
        return []
    maps = token_maps_maybe_normed(queries, keys, 4 * p.tolerance("queries"), 4 * p.tolerance("keys"))
    if maps is None:
        return []
    return [ROTARY("queries", "tokens", what=mapped(maps))]


def _factors(queries: float, keys: float) -> str:
    """QK-norm, then a factor on the queries or keys (Muse Spark's qk_scale_factor, nGPT's sqk): with
    their lengths fixed by the norm, the factor is a temperature the class sets on attn_scores."""
    return (f"are normalised to root-mean-square 1 (QK-norm), then the queries multiplied by {fmt(queries)} and the "
            f"keys by {fmt(keys)}: attn_scores carry a factor of {fmt(queries * keys)}, a temperature the class sets "
            f"on normalised queries and keys (as Muse Spark's qk_scale_factor and nGPT's sqk do)")


def _same(a: Rotation, b: Rotation) -> bool:
    """One rotation: the same coordinates turned by the same angles and scaled by the same factor."""
    return (a.dims == b.dims and abs(b.scale / a.scale - 1) <= _SAME_SCALE
            and float((a.frequencies - b.frequencies).abs().max()) <= 1e-4 * float(a.frequencies.abs().max()))


def _together(p: Pair, queries: tuple[torch.Tensor, torch.Tensor],
              keys: tuple[torch.Tensor, torch.Tensor]) -> Rotation | None:
    """One rotation fitted on the queries and keys together: where one alone cannot tell a slowly
    turning pair from one passed through, the other's angles decide (RoPE turns both alike)."""
    mine, ref = (torch.cat([t.reshape(-1, *t.shape[-2:]) for t in stage]) for stage in zip(queries, keys))
    return rotation_maybe_normed(mine, ref, 4 * max(p.tolerance("queries"), p.tolerance("keys")))


@finds(QK_NORM)
@recogniser
def qk_norm(p: Pair) -> list[Finding]:
    pairs = {stage: pair for stage in ("queries", "keys") if (pair := p.both(stage)) is not None}
    if len(pairs) != 2 or not p.changed("queries"):
        return []
    queries = pairs["queries"][0]
    norm = next((norm for norm in norms(queries)
                 if all(unit_rms_of(*pair, p.tolerance(stage), norm) for stage, pair in pairs.items())), None)
    if norm is None:
        return []
    head_dim = queries.shape[-1]
    if norm == PER_HEAD_LAYER:
        what = (f"queries and keys are normalised as LayerNorm does (QK-norm, as Persimmon does): each head's query "
                f"and key vectors have their mean over head_dim={head_dim} subtracted and are divided by their "
                f"standard deviation before queries @ keys.T")
    elif norm in (WHOLE_WIDTH, WHOLE_WIDTH_LAYER):
        how = ("have root-mean-square 1 (RMSNorm, as OLMo 2 does)" if norm == WHOLE_WIDTH
               else "have their mean subtracted and are divided by their standard deviation (LayerNorm, as ESM C does)")
        what = (f"queries and keys are normalised (QK-norm) over the whole projection: each token's query, all "
                f"{queries.shape[1]} heads together, and its key {how} before they are split into heads of {head_dim}")
    else:
        what = (f"queries and keys are normalised (QK-norm): each head's query and key vectors have root-mean-square "
                f"1 over their head_dim={head_dim} before queries @ keys.T, so every attn_score lies within "
                f"+-{head_dim} whatever the inputs' scale")
    return [QK_NORM("queries", what=what, values=_values_normed(p))]


def _values_normed(p: Pair) -> str:
    """The values normalised per head as well (Gemma 3n's v_norm), said beside the QK-norm."""
    values = p.both("values")
    if values is None or not p.changed("values") or not unit_rms_of(*values, p.tolerance("values"), PER_HEAD):
        return ""
    return "; the values too have root-mean-square 1 per head (a norm on the values, as Gemma 3n's v_norm)"
