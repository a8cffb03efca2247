"""Rotary positions and normalised queries and keys, named from the query and key stages."""

from __future__ import annotations

import torch

from attnlab.diagnosis.context import Pair, finding
from attnlab.diagnosis.message_format import fmt
from attnlab.diagnosis.recognisers.norms import (
    PER_HEAD,
    PER_HEAD_LAYER,
    WHOLE_WIDTH,
    norms,
    rotation_maybe_normed,
    unit_rms_of,
)
from attnlab.diagnosis.recognisers.recogniser import recogniser
from attnlab.diagnosis.recognisers.rotation import Rotation, fit_rotation, reversed_turn, turned
from attnlab.record import Finding

_SAME_SCALE = 1e-3  # queries' and keys' scales apart by more: not one attention factor on cos and sin


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
    rotated = [stage for stage, turn in turns.items() if turn is not None]
    if not rotated:
        return []
    turn = turns[rotated[0]]
    head_dim = queries[1].shape[-1]
    what = turned(turn, head_dim)
    if len(rotated) == 1:
        other = "keys" if rotated == ["queries"] else "queries"
        if changed[other]:
            return []  # the other one changed some other way: not a rotation this can name
        return [finding("rotary_misapplied", other, f"the {rotated[0]} are {what}, but the {other} are not: "
                        f"rotate queries and keys with the same angles, so that each score depends only on the "
                        f"distance between its query and key tokens.")]
    keys_turn = turns["keys"]
    joint = turn if _same(turn, keys_turn) else _together(p, queries, keys)
    if joint is None and abs(keys_turn.scale / turn.scale - 1) > _SAME_SCALE:
        return []  # one of them rescaled beyond the rotation: a wrong projection, left to the source checks
    if joint is None:
        return [finding("rotary_misapplied", "keys", f"the queries are {what}, but the keys are turned by "
                        f"other angles ({turned(keys_turn, head_dim)}); rotate both with the same angles.")]
    turn, what = joint, turned(joint, head_dim)
    values = p.both("values")
    # values wrong some other way are left to the value-path check: the rotation is still named
    if changed.get("values") and values is not None and fit_rotation(*values, 4 * p.tolerance("values")) is not None:
        return [finding("rotary_misapplied", "values", f"the values are rotated by position like the "
                        f"queries and keys ({turn.pairing}); RoPE rotates only queries and keys: compute the "
                        f"values as x @ W_value, unrotated.")]
    if float(turn.frequencies.max()) < 0:  # the reference's are the turned ones
        theirs = turned(reversed_turn(turn), head_dim)
        return [finding("rotary", "queries", f"the reference applies a rotary position embedding (RoPE) that the "
                        f"variant does not: the reference's queries and keys are {theirs}, the variant's are not "
                        f"rotated, so its attn_scores do not depend on the query-key distance as the reference's do; "
                        f"the scores, weights and context differ from the reference's from here on.")]
    kept = "keep their length" if turn.scale == 1 else f"keep their length times {fmt(turn.scale)}"
    return [finding("rotary", "queries", f"rotary position embedding (RoPE): queries and keys are {what}; "
                    f"each token's query and key {kept}, so attn_scores depend on the query-key "
                    f"distance, and the scores, weights and context differ from the reference's from here on.")]


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


@recogniser
def qk_norm(p: Pair) -> list[Finding]:
    pairs = {stage: p.both(stage) for stage in ("queries", "keys")}
    if any(pair is None for pair in pairs.values()) or not p.changed("queries"):
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
    elif norm == WHOLE_WIDTH:
        what = (f"queries and keys are normalised (QK-norm) over the whole projection, as OLMo 2 does: each token's "
                f"query, all {queries.shape[1]} heads together, and its key have root-mean-square 1 before they are "
                f"split into heads of {head_dim}")
    else:
        what = (f"queries and keys are normalised (QK-norm): each head's query and key vectors have root-mean-square "
                f"1 over their head_dim={head_dim} before queries @ keys.T, so every attn_score lies within "
                f"+-{head_dim} whatever the inputs' scale")
    return [finding("qk_norm", "queries", f"{what}{_values_normed(p)}; the scores, weights and context differ from "
                    f"the reference's from here on.")]


def _values_normed(p: Pair) -> str:
    """The values normalised per head as well (Gemma 3n's v_norm), said beside the QK-norm."""
    values = p.both("values")
    if values is None or not p.changed("values") or not unit_rms_of(*values, p.tolerance("values"), PER_HEAD):
        return ""
    return "; the values too have root-mean-square 1 per head (a norm on the values, as Gemma 3n's v_norm)"
