"""xPos: rotary positions with a per-position scale (torchscale's XPOS). Each pair of a query's
coordinates is scaled by zeta_i ** (t / gamma) and the key's by its inverse, then both are turned
as RoPE turns them, so each score decays with the query-key distance. Read from the pairs' lengths
(their log linear in the position, the keys' the queries' negated) and, once divided out, the rotation."""

from __future__ import annotations

import torch

from attnlab.diagnosis.context import Pair
from attnlab.diagnosis.finding_code import Code, finds
from attnlab.diagnosis.message_format import fmt
from attnlab.diagnosis.recognisers.recogniser import recogniser
from attnlab.diagnosis.recognisers.rotation import _PAIRINGS, fit_rotation, turned
from attnlab.record import Finding

_LINEAR = 1e-3  # how far the log of a pair's length ratio may stray from a line in the position


XPOS = Code(
    "xpos", ("queries",), "info",
    "rotary positions with each pair of the queries scaled by zeta ** (t / gamma), the keys' by its inverse (xPos)",
    "xPos: queries and keys {turned}, each pair of the queries scaled by zeta_i ** (t / gamma) and of the keys by its "
    "inverse, so pair i's share of a score shrinks by a factor per token of query-key distance ({decay}); "
    "deliberate, so the scores, weights and context differ from the reference's from here on.",
    "xPos (torchscale): rotary positions with each pair of the queries scaled by zeta_i ** (t / gamma) and of the "
    "keys by its inverse, so each pair's share of a score decays with the query-key distance; names the pairing, the "
    "base and the decay per token",
    ("tests/diagnosis/test_declared_changes.py::test_xpos_is_named_not_a_query_source",), "deliberate")


@finds(XPOS)
@recogniser
def xpos(p: Pair) -> list[Finding]:
    queries, keys = p.both("queries"), p.both("keys")
    if queries is None or keys is None or not (p.changed("queries") and p.changed("keys")):
        return []
    head_dim = queries[1].shape[-1]
    if head_dim % 2:
        return []  # no pairs to turn
    for indices in _PAIRINGS.values():
        first, second = indices(head_dim)
        slopes = _log_scale(*queries, first, second)
        if slopes is None or float(slopes[0].abs().max()) <= _LINEAR:
            continue
        keys_scale = _log_scale(*keys, first, second)
        if keys_scale is None or not torch.allclose(keys_scale[1], -slopes[1], atol=_LINEAR):
            continue
        unscaled = [_divided(mine, log, first, second) for (mine, _), log in ((queries, slopes[1]), (keys, keys_scale[1]))]
        turns = [fit_rotation(u, ref, 4 * p.tolerance(stage))
                 for u, (_, ref), stage in zip(unscaled, (queries, keys), ("queries", "keys"))]
        if turns[0] is None or turns[1] is None:
            continue
        decay = ", ".join(fmt(float(v)) for v in slopes[0].exp()[:4])
        more = ", ..." if slopes[0].numel() > 4 else ""
        return [XPOS("queries", turned=turned(turns[0], head_dim), decay=decay + more)]
    return []


def _log_scale(mine: torch.Tensor, ref: torch.Tensor, first: torch.Tensor,
               second: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor] | None:
    """(the slope per pair, the log length ratio per (token, pair)) when every pair's length over the
    reference's is one factor per (token, pair), its log linear in the token; else None."""
    lengths = [torch.stack([t[..., first], t[..., second]], dim=-1).double().norm(dim=-1) for t in (mine, ref)]
    seen = lengths[1] > 1e-6 * float(lengths[1].max())  # (b, nh, T, pairs)
    if not bool(seen.all()):
        return None
    log = (lengths[0] / lengths[1]).log()  # (b, nh, T, pairs)
    per_token = log.flatten(0, 1).mean(0)  # (T, pairs): the same for every batch item and head
    if float((log - per_token).abs().max()) > _LINEAR:
        return None
    position = torch.arange(per_token.shape[0], dtype=torch.float64)[:, None]  # (T, 1)
    centred = position - position.mean()
    slope = (centred * (per_token - per_token.mean(0))).sum(0) / (centred ** 2).sum()  # (pairs,)
    line = per_token.mean(0) + centred * slope
    if float((per_token - line).abs().max()) > _LINEAR:
        return None
    return slope, per_token


def _divided(mine: torch.Tensor, log: torch.Tensor, first: torch.Tensor, second: torch.Tensor) -> torch.Tensor:
    """The variant's stage with each pair divided by its per-(token, pair) factor."""
    factor = torch.ones(mine.shape[-2], mine.shape[-1], dtype=torch.float64)  # (T, hs)
    factor[:, first], factor[:, second] = log.exp(), log.exp()
    return (mine.double() / factor).to(mine.dtype)
