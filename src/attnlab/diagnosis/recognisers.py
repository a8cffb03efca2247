"""Deliberate changes to attention, named from the captured stages (issue 15).

Rotary positions, a bias on the query-key distance (ALiBi), a sliding window, soft-capped
scores, normalised queries and keys: none of them is a bug, but each makes the stages differ
from the reference's, and the plain checks would call that a wrong query source or a wrong
scaling. Each recogniser here compares the variant's stages with the reference's and names
the change when the numbers fit it — never by the variant's name — so a user's own
implementation gets the same words as the built-in plugin.

A change applied wrongly is not recognised as the change: RoPE on the values too, or on the
queries but not the keys, is an error finding (`rotary_misapplied`); a window or a bias that
does not fit is left to the mask and scaling checks. Linear attention never makes its weights;
when its context equals a kernel attention of the queries and keys, `not_softmax` (an error:
it is the `plain_normalisation` bug) says what the weights are instead.

Each recogniser is a check declared in `attnlab.diagnosis.codes` (adding one is a function here
and a row there); they run first, since each would otherwise read as a wrong source or scale.
"""

from __future__ import annotations

import functools
import itertools
import math
from dataclasses import dataclass
from typing import Callable, Iterator, NamedTuple

import torch
import torch.nn.functional as F

from attnlab.diagnosis.context import Check, Context, Found, Pair, finding
from attnlab.diagnosis.diagnostics import max_abs
from attnlab.diagnosis.words import fmt
from attnlab.record import Finding

_EPS = float(torch.finfo(torch.float32).eps)
_UNIT_RMS = 1e-3  # |RMS - 1| a normalised vector may show (the norm's eps, float32 rounding)


def _recogniser(recognise: Callable[[Pair], list[Finding]]) -> Check:
    """A check that names a change read from the variant and the reference, on enough tokens to
    tell it from a bug."""

    @functools.wraps(recognise)
    def check(ctx: Context, found: Found) -> list[Finding]:
        return recognise(ctx.pair) if ctx.pair.fits else []

    return check


def _heads(t: torch.Tensor) -> Iterator[tuple[int, int]]:
    """Every (batch item, head) of a (batch, heads, ...) stage: (query x key) work one head at a time."""
    return itertools.product(range(t.shape[0]), range(t.shape[1]))


# -- rotary -----------------------------------------------------------------------------------------

_PAIRINGS: dict[str, Callable[[int], tuple[torch.Tensor, torch.Tensor]]] = {
    # (x_i, x_{i + head_dim/2}), as Llama and GPT-NeoX rotate
    "half-split pairs (Llama)": lambda d: (torch.arange(d // 2), torch.arange(d // 2, d)),
    # (x_{2i}, x_{2i+1}), as RoFormer and GPT-J rotate
    "interleaved pairs (RoFormer)": lambda d: (torch.arange(0, d, 2), torch.arange(1, d, 2)),
}


@dataclass(frozen=True)
class _Rotation:
    pairing: str
    frequencies: torch.Tensor  # (dims // 2,) radians per token, one per pair
    dims: int  # the leading coordinates turned: head_dim, or fewer for a partial RoPE


def _turned_dims(mine: torch.Tensor, ref: torch.Tensor, tol: float) -> int:
    """How many leading coordinates are not passed through: a partial RoPE (GPT-NeoX, Phi,
    StableLM) turns the first ones and leaves the trailing ones as they were."""
    same = ((mine.double() - ref.double()).abs() <= tol).flatten(0, -2).all(dim=0)  # (head_dim,)
    return ref.shape[-1] - int(same.flip(0).int().cumprod(0).sum())


def _rotation(mine: torch.Tensor, ref: torch.Tensor, tol: float) -> _Rotation | None:
    """Whether `mine` is `ref` (batch, heads, tokens, head_dim) with every pair of coordinates of
    token t turned by t * frequency (one frequency per pair): the per-token norms are kept and the
    angle grows linearly with the position. Trailing coordinates passed through are a partial RoPE."""
    d = _turned_dims(mine, ref, tol)
    mine, ref = mine[..., :d], ref[..., :d]
    n = ref.shape[-2]
    if d == 0 or d % 2 or n < 2:
        return None
    x, y = ref.double(), mine.double()
    if (x.norm(dim=-1) - y.norm(dim=-1)).abs().max() > tol * math.sqrt(d):
        return None
    positions = torch.arange(n, dtype=torch.float64)[:, None]  # (tokens, 1)
    rtol = 1e-5 + 4 * _EPS * n  # a float32 angle t * frequency carries t * eps of rounding
    for pairing, indices in _PAIRINGS.items():
        a, b = indices(d)
        z_ref, z = torch.complex(x[..., a], x[..., b]), torch.complex(y[..., a], y[..., b])  # (b, h, tokens, d/2)
        turn = z * z_ref.conj()  # |z_ref|^2 * e^(i angle)
        step = turn[..., 1:, :] * turn[..., :-1, :].conj()  # the angle gained from one token to the next
        weight = step.abs().flatten(0, 2)  # (samples, d/2): small vectors carry little angle information
        frequency = (weight * step.angle().flatten(0, 2)).sum(0) / weight.sum(0).clamp_min(1e-300)  # (d/2,)
        # one refinement over all positions: the residual angle, wrapped, fitted through the origin
        residual = torch.angle(turn * torch.exp(-1j * positions * frequency))  # (b, h, tokens, d/2)
        w = turn.abs()
        frequency = frequency + (w * positions * residual).sum((0, 1, 2)) / (w * positions**2).sum((0, 1, 2)).clamp_min(1e-300)
        rotated = z_ref * torch.exp(1j * positions * frequency)
        turning = float(frequency.abs().max()) > rtol  # no angle at all is no rotation (QK-norm alone)
        if turning and (rotated - z).abs().max() <= tol + rtol * float(x.abs().max()):
            return _Rotation(pairing, frequency, d)
    return None


class _Norm(NamedTuple):
    """A normalisation of queries or keys: the axes it spans, (b, h, t, hs), and whether it
    subtracts the mean first (LayerNorm) or not (RMSNorm)."""

    span: tuple[int, ...]
    centred: bool


_PER_HEAD = _Norm((-1,), False)  # RMSNorm of each head's vector: Qwen3, Gemma 3
_WHOLE_WIDTH = _Norm((1, -1), False)  # RMSNorm of every head's together, before the split: OLMo 2
_PER_HEAD_LAYER = _Norm((-1,), True)  # LayerNorm of each head's vector: Persimmon


def _norms(x: torch.Tensor) -> tuple[_Norm, ...]:
    return (_PER_HEAD, _WHOLE_WIDTH, _PER_HEAD_LAYER) if x.dim() == 4 else (_PER_HEAD, _PER_HEAD_LAYER)


def _centred(x: torch.Tensor, norm: _Norm) -> torch.Tensor:
    x = x.double()
    return x - x.mean(dim=norm.span, keepdim=True) if norm.centred else x


def _rms_normed(x: torch.Tensor, eps: float = 0.0, norm: _Norm = _PER_HEAD) -> tuple[torch.Tensor, float]:
    """x divided per vector by sqrt(mean(x^2) over the norm's span + eps), as RMSNorm does (its
    mean subtracted first for a LayerNorm), and the smallest such divisor."""
    x = _centred(x, norm)
    rms = (x.pow(2).mean(dim=norm.span, keepdim=True) + eps).sqrt().clamp_min(1e-12)
    return x / rms, float(rms.min())


def _norm_eps(mine: torch.Tensor, ref: torch.Tensor, norm: _Norm = _PER_HEAD) -> float:
    """The eps of an RMSNorm x / sqrt(mean(x^2) + eps) that would turn `ref` into `mine`, read off
    the vector with the smallest mean square, where eps shows most (a short query vector of a
    2-wide head comes out visibly below RMS 1); 0 where none shows."""
    ref_ms = _centred(ref, norm).pow(2).mean(dim=norm.span).flatten()
    mine_ms = mine.double().pow(2).mean(dim=norm.span).flatten()
    i = int(ref_ms.argmin())
    if not 0 < float(mine_ms[i]) < 1:
        return 0.0
    return max(float(ref_ms[i] / mine_ms[i] - ref_ms[i]), 0.0)  # mine_ms = ref_ms / (ref_ms + eps)


def _rotation_maybe_normed(mine: torch.Tensor, ref: torch.Tensor, tol: float) -> _Rotation | None:
    """`_rotation` of `ref` itself, or of `ref` RMS-normalised first (QK-norm, then RoPE, as in
    OLMo 2 and Qwen3: a rotation keeps the RMS, so the order does not matter)."""
    turn = _rotation(mine, ref, tol)
    for norm in _norms(ref) if turn is None else ():
        normed, smallest = _rms_normed(ref, _norm_eps(mine, ref, norm), norm)
        turn = _rotation(mine, normed, _UNIT_RMS + tol / smallest)
        if turn is not None:
            break
    return turn


def _base(rotation: _Rotation, head_dim: int) -> str:
    """The base b of frequency_i = b ** (-2i / d), d the coordinates turned, fitted in log space, in words."""
    freq, d = rotation.frequencies, rotation.dims
    if freq.numel() < 2:
        return "one pair per head (head_dim 2), so no base can be fitted"
    over = "head_dim" if d == head_dim else str(d)
    i = torch.arange(freq.numel(), dtype=torch.float64)
    exponent = 2 * i[1:] / d
    log_freq = torch.log(freq[1:].abs().clamp_min(1e-300))
    log_base = -float((exponent * log_freq).sum() / (exponent**2).sum())
    fitted = torch.exp(-log_base * 2 * i / d)
    if (fitted - freq).abs().max() > 1e-3 * float(freq.abs().max()) or abs(float(freq[0]) - 1) > 1e-3:
        shown = ", ".join(fmt(float(f)) for f in freq[:4])
        return f"frequencies {shown}{', ...' if freq.numel() > 4 else ''} radians per token, not base ** (-2i / {over})"
    return f"theta (base) {fmt(math.exp(log_base))}: pair i turns by theta ** (-2i / {over}) radians per token"


def _turned(rotation: _Rotation, head_dim: int) -> str:
    """How the rotation turns, in words, a partial RoPE named as one."""
    what = f"rotated by position over {rotation.pairing}, {_base(rotation, head_dim)}"
    if rotation.dims == head_dim:
        return what
    return (f"{what}, over the first {rotation.dims} of their {head_dim} coordinates (a partial RoPE: the other "
            f"{head_dim - rotation.dims} pass through unturned)")


def _heads_matched(p: Pair, stage: str) -> tuple[torch.Tensor, torch.Tensor] | None:
    """Both sides' stage, the side with fewer key/value heads repeated to the other's count as
    repeat_kv does: how the two sides group their keys is the kv_heads note's, not this stage's."""
    pair = p.both(stage)
    mine, ref = p.v.stages.get(stage), p.ref.stages.get(stage)
    if pair is not None or mine is None or ref is None or mine.dim() != 4 or ref.dim() != 4:
        return pair
    few, many = sorted((mine.shape[1], ref.shape[1]))
    if mine.shape[::2] != ref.shape[::2] or mine.shape[3] != ref.shape[3] or few == 0 or many % few:
        return None
    return mine.repeat_interleave(many // mine.shape[1], dim=1), ref.repeat_interleave(many // ref.shape[1], dim=1)


@_recogniser
def rotary(p: Pair) -> list[Finding]:
    queries, keys = p.both("queries"), _heads_matched(p, "keys")
    if queries is None or keys is None:
        return []
    changed = {stage: p.changed(stage) for stage in ("queries", "keys", "values") if _heads_matched(p, stage) is not None}
    if not (changed["queries"] or changed["keys"]):
        return []
    turns = {stage: _rotation_maybe_normed(*pair, 4 * p.tolerance(stage)) if changed[stage] else None
             for stage, pair in (("queries", queries), ("keys", keys))}
    rotated = [stage for stage, turn in turns.items() if turn is not None]
    if not rotated:
        return []
    turn = turns[rotated[0]]
    head_dim = queries[1].shape[-1]
    what = _turned(turn, head_dim)
    if len(rotated) == 1:
        other = "keys" if rotated == ["queries"] else "queries"
        if changed[other]:
            return []  # the other one changed some other way: not a rotation this can name
        return [finding("rotary_misapplied", other, f"the {rotated[0]} are {what}, but the {other} are not: "
                        f"rotate queries and keys with the same angles, so that each score depends only on the "
                        f"distance between its query and key tokens.")]
    keys_turn = turns["keys"]
    if keys_turn.dims != turn.dims or (keys_turn.frequencies - turn.frequencies).abs().max() > 1e-4 * float(
            turn.frequencies.abs().max()):
        return [finding("rotary_misapplied", "keys", f"the queries are {what}, but the keys are turned by "
                        f"other angles ({_turned(keys_turn, head_dim)}); rotate both with the same angles.")]
    values = p.both("values")
    if changed.get("values") and values is not None:
        if _rotation(*values, 4 * p.tolerance("values")) is None:
            return []  # values wrong some other way: left to the value-path check
        return [finding("rotary_misapplied", "values", f"the values are rotated by position like the "
                        f"queries and keys ({turn.pairing}); RoPE rotates only queries and keys: compute the "
                        f"values as x @ W_value, unrotated.")]
    if float(turn.frequencies.max()) < 0:  # the reference's are the turned ones
        theirs = _turned(_Rotation(turn.pairing, -turn.frequencies, turn.dims), head_dim)
        return [finding("rotary", "queries", f"the reference applies a rotary position embedding (RoPE) that the "
                        f"variant does not: the reference's queries and keys are {theirs}, the variant's are not "
                        f"rotated, so its attn_scores do not depend on the query-key distance as the reference's do; "
                        f"the scores, weights and context differ from the reference's from here on.")]
    return [finding("rotary", "queries", f"rotary position embedding (RoPE): queries and keys are {what}; "
                    f"each token's query and key keep their length, so attn_scores depend on the query-key "
                    f"distance, and the scores, weights and context differ from the reference's from here on.")]


# -- normalised queries and keys -------------------------------------------------------------------


def _unit_rms_of(mine: torch.Tensor, ref: torch.Tensor, tol: float, norm: _Norm = _PER_HEAD) -> bool:
    """`mine` is `ref` normalised per vector over the norm's span to root-mean-square 1 (then
    perhaps rotated by position: RoPE after QK-norm)."""
    rms = mine.double().pow(2).mean(dim=norm.span).sqrt()
    if (rms - 1).abs().median() > _UNIT_RMS or rms.max() > 1 + _UNIT_RMS:  # most at 1; a short one below (eps)
        return False
    normed, smallest = _rms_normed(ref, _norm_eps(mine, ref, norm), norm)
    tol = _UNIT_RMS + tol / smallest
    return bool((normed - mine.double()).abs().max() <= tol) or _rotation(mine, normed, tol) is not None  # or then RoPE


@_recogniser
def qk_norm(p: Pair) -> list[Finding]:
    pairs = {stage: p.both(stage) for stage in ("queries", "keys")}
    if any(pair is None for pair in pairs.values()) or not p.changed("queries"):
        return []
    queries = pairs["queries"][0]
    norm = next((norm for norm in _norms(queries)
                 if all(_unit_rms_of(*pair, p.tolerance(stage), norm) for stage, pair in pairs.items())), None)
    if norm is None:
        return []
    head_dim = queries.shape[-1]
    if norm == _PER_HEAD_LAYER:
        return [finding("qk_norm", "queries", f"queries and keys are normalised as LayerNorm does (QK-norm, as "
                        f"Persimmon does): each head's query and key vectors have their mean over head_dim={head_dim} "
                        f"subtracted and are divided by their standard deviation before queries @ keys.T; the scores, "
                        f"weights and context differ from the reference's from here on.")]
    if norm == _WHOLE_WIDTH:
        return [finding("qk_norm", "queries", f"queries and keys are normalised (QK-norm) over the whole projection, "
                        f"as OLMo 2 does: each token's query, all {queries.shape[1]} heads together, and its key have "
                        f"root-mean-square 1 before they are split into heads of {head_dim}; the scores, weights and "
                        f"context differ from the reference's from here on.")]
    return [finding("qk_norm", "queries", f"queries and keys are normalised (QK-norm): each head's query "
                    f"and key vectors have root-mean-square 1 over their head_dim={head_dim} before queries @ keys.T, "
                    f"so every attn_score lies within +-{head_dim} whatever the inputs' scale; the scores, weights "
                    f"and context differ from the reference's from here on.")]


# -- masks and biases on the softmax input ----------------------------------------------------------


@_recogniser
def window(p: Pair) -> list[Finding]:
    pair = p.both("scaled_scores")
    if pair is None or pair[0].dim() != 4 or not p.changed("scaled_scores"):
        return []
    mine, ref = pair
    n_query, n_key = mine.shape[-2:]
    future = torch.ones(n_query, n_key, dtype=torch.bool, device=mine.device).triu(1)
    if n_query != n_key or not all(torch.equal(torch.isneginf(ref[i]), future) for i in _heads(ref)):
        return []  # a window is read against the reference's causal mask
    window = 0
    for i in _heads(mine):  # the widest row of any head; one that sees every key ends it
        window = max(window, int((~torch.isneginf(mine[i])).sum(dim=-1).max()))
        if window >= n_key:
            return []
    hidden = future | torch.ones_like(future).tril(-window)
    weights = p.v.stages.get("weights")
    for i in _heads(mine):
        if not torch.equal(torch.isneginf(mine[i]), hidden) or (weights is not None and bool(weights[i][hidden].any())):
            return []
    last = n_query - 1
    seen = ", ".join(str(t) for t in range(last - window + 1, last + 1))
    return [finding("window", "scaled_scores", f"a sliding window of {window}: each query sees the last "
                    f"{window} keys, itself included (token {last} sees {seen}); the keys further back are -inf "
                    f"like the future ones, so their weights are 0 and each row of the weights still sums to 1.")]


def _changed_softmax_input(p: Pair) -> tuple[torch.Tensor, torch.Tensor] | None:
    """The variant's and the reference's softmax inputs when they differ by more than rounding with
    the same -inf entries (the mask kept as it was)."""
    pair = p.both("scaled_scores")
    if pair is None or pair[0].dim() != 4 or not p.changed("scaled_scores"):
        return None
    if not all(torch.equal(torch.isneginf(pair[0][i]), torch.isneginf(pair[1][i])) for i in _heads(pair[0])):
        return None
    return pair


def _scores_tolerance(p: Pair) -> float:
    """What two computations of the softmax input may differ by, the variant's own terms included."""
    scaled = p.v.stages["scaled_scores"]
    largest = max(float(torch.where(torch.isfinite(scaled[i]), scaled[i].abs(), 0).max()) for i in _heads(scaled))
    return 8 * p.tolerance("scaled_scores") + 8 * _EPS * largest


def _published_alibi_slopes(num_heads: int) -> list[float]:
    """ALiBi's slopes (Press et al., 2022): 2 ** (-8 (h + 1) / n) for n heads a power of two;
    otherwise those of the power of two below n, then every other slope of twice that power."""
    below = 2 ** int(math.floor(math.log2(num_heads)))
    slopes = [2 ** (-8 * (h + 1) / below) for h in range(below)]
    return slopes + [2 ** (-8 * (h + 1) / (2 * below)) for h in range(0, 2 * below, 2)][: num_heads - below]


_ROWS = 256  # rows of one head's matrix taken at a time, so the temporaries stay small at any length


def _distance_bias(mine: torch.Tensor, ref: torch.Tensor, tol: float) -> dict[int, float] | None:
    """{query - key: the bias} when mine - ref on one head depends only on the query-key distance."""
    n_query, n_key = mine.shape
    if not _shift_invariant(mine[:_ROWS + 1], ref[:_ROWS + 1], 2 * tol, n_key - n_query):
        return None  # two entries of one diagonal further apart than two tolerances: no common bias
    size = n_query + n_key - 1
    sums, counts = torch.zeros(size, dtype=torch.float64), torch.zeros(size, dtype=torch.int64)
    for diff, where in _by_distance(mine, ref):
        sums += torch.bincount(where, weights=diff, minlength=size)
        counts += torch.bincount(where, minlength=size)
    bias = sums / counts.clamp_min(1)
    if any(diff.numel() and float((diff - bias[where]).abs().max()) > tol for diff, where in _by_distance(mine, ref)):
        return None
    return {d - (n_key - 1): float(bias[d]) for d in counts.nonzero().flatten().tolist()}


def _by_distance(mine: torch.Tensor, ref: torch.Tensor) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """(mine - ref in float64 from each row's diagonal, query - key + n_key - 1) where both are
    finite, a few rows at a time."""
    n_key = mine.shape[1]
    for start in range(0, mine.shape[0], _ROWS):
        diff = _anchored(mine[start:start + _ROWS].double() - ref[start:start + _ROWS], start, n_key - mine.shape[0])
        finite = torch.isfinite(diff)  # mine - ref is finite exactly where both are
        distance = torch.arange(start, start + diff.shape[0])[:, None] - torch.arange(n_key)[None, :] + (n_key - 1)
        yield diff[finite], distance.expand_as(finite)[finite]


def _anchored(diff: torch.Tensor, first: int, offset: int) -> torch.Tensor:
    """`diff` (rows first.., n_key) less each row's value at its own query's key (column row + offset):
    a constant per row is one the softmax ignores (Bloom's and Falcon's ALiBi add slope * key position)."""
    rows = torch.arange(diff.shape[0])
    at = rows + first + offset  # (rows,)
    inside = (at >= 0) & (at < diff.shape[1])
    anchor = torch.zeros(diff.shape[0], dtype=diff.dtype)
    anchor[inside] = diff[rows[inside], at[inside]]
    return diff - torch.where(torch.isfinite(anchor), anchor, 0)[:, None]


def _shift_invariant(mine: torch.Tensor, ref: torch.Tensor, tol: float, offset: int) -> bool:
    """Whether mine - ref, from each row's diagonal, agrees within tol with its neighbour one step
    down each diagonal."""
    diff = _anchored(mine.double() - ref, 0, offset)  # (rows, n_key)
    gap = (diff[1:, 1:] - diff[:-1, :-1]).abs()  # NaN or inf where either entry is masked
    return not bool(((gap > tol) & (gap < math.inf)).any())


def _slope(bias: dict[int, float], tol: float) -> float | None:
    """The least-squares slope of the bias against the distance, when the bias is a line within tol."""
    if len(bias) < 2:
        return None
    d = torch.tensor(list(bias), dtype=torch.float64)
    b = torch.tensor(list(bias.values()), dtype=torch.float64)
    slope = float(((d - d.mean()) * (b - b.mean())).sum() / ((d - d.mean()) ** 2).sum())
    return slope if (b - b.mean() - slope * (d - d.mean())).abs().max() <= tol else None


@_recogniser
def position_bias(p: Pair) -> list[Finding]:
    pair = _changed_softmax_input(p)
    if pair is None:
        return []
    mine, ref = pair
    tol = _scores_tolerance(p)
    biases: list[dict[int, float]] = []
    for b, h in _heads(mine):
        bias = _distance_bias(mine[b, h], ref[b, h], tol)
        if bias is None:
            return []  # not a function of the distance alone
        if b == 0:
            biases.append(bias)
        elif any(abs(v - biases[h].get(d, v)) > tol for d, v in bias.items()):
            return []  # another bias for another batch item: not a position bias
    sizes = [abs(v) for bias in biases for v in bias.values()]
    if not sizes or max(sizes) <= tol:  # no bias, or none seen (NaN everywhere)
        return []
    slopes = [_slope(bias, tol) for bias in biases]
    heads = len(biases)
    if any(s is not None and s > tol for s in slopes):
        return []  # a linear bias that grows with the distance favours far keys: ALiBi's sign turned, a bug
    if all(s is not None for s in slopes):
        published = _published_alibi_slopes(heads)
        alibi = all(abs(-s - want) <= 1e-3 * want for s, want in zip(slopes, published))
        per_head = ", ".join(f"head {h}: {fmt(-s)}" for h, s in enumerate(slopes))
        what = (f"linear in the distance, as ALiBi: bias = -slope * (query - key) with slope {per_head}"
                + (f" (the published ALiBi slopes for {heads} heads)" if alibi else ""))
    else:
        shown = "; ".join(f"head {h}: " + ", ".join(f"{d}: {fmt(v)}" for d, v in sorted(bias.items()) if 0 <= d < 4)
                          for h, bias in enumerate(biases[:2]))
        what = f"not linear in the distance (bias by distance {shown}{' ...' if heads > 2 else ''})"
    return [finding("position_bias", "scaled_scores", f"a position bias: the softmax input is the "
                    f"reference's scaled scores plus a bias that depends only on the query-key distance (measured "
                    f"from each query's own key: a constant added to a whole row changes no weight), per head, "
                    f"{what}; the weights and context differ from the reference's from here on.")]


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
    rows = [(*i, slice(start, start + _ROWS)) for i in _heads(scaled) for start in range(0, scaled.shape[2], _ROWS)]
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
    tol = 64 * _EPS * bend.largest  # relative to the scores: small scores are bent little, but bent
    if bend.departure <= tol:
        return None  # nothing capped
    cap = _cap_through(bend.score, bend.logit)
    if cap is None or any(float((cap * torch.tanh(scale * scores / cap) - logits).abs().max()) > tol
                          for scores, logits in _own_logits(p)):
        return None
    return cap


def _scales(p: Pair) -> tuple[float, float] | None:
    """(the variant's declared or else the usual 1/sqrt(head_dim) factor, the usual one)."""
    keys = p.v.stages.get("keys")
    if keys is None:
        return None
    usual = keys.shape[-1] ** -0.5
    return (p.v.declared_scale[0] if p.v.declared_scale else usual), usual


@_recogniser
def softcap(p: Pair) -> list[Finding]:
    scales = _scales(p) if p.changed("scaled_scores") else None
    cap = _cap(p, scales[0]) if scales else None
    if cap is None:
        return []
    return [finding("softcap", "scaled_scores", f"soft-capped scores: the softmax input is "
                    f"{fmt(cap)} * tanh(s / {fmt(cap)}) of the scaled scores s, applied before the "
                    f"mask (the masked entries stay -inf), so no score reaches +-{fmt(cap)} and large scores are "
                    f"squashed the most; the weights and context differ from the reference's from here on.")]


@_recogniser
def declared_scale(p: Pair) -> list[Finding]:
    """A scale the module's config declares (Gemma's query_pre_attn_scalar), seen in the softmax
    input, alone or under a soft cap: deliberate, an info finding, never a `scaling` error."""
    scales = _scales(p) if p.v.declared_scale is not None else None
    if scales is None:
        return []
    (factor, where), usual = p.v.declared_scale, scales[1]
    theirs = p.ref.declared_scale[0] if p.ref.declared_scale else usual
    if abs(factor - theirs) <= 1e-6 * theirs:
        return []  # the reference scales the same way (Gemma's eager against its own sdpa)
    bend = _bend(p, factor)
    if bend is None:
        return []
    plain = bend.departure <= 64 * _EPS * max(bend.largest, 1.0)
    if not plain and _cap(p, factor) is None:
        return []
    return [finding("declared_scale", "scaled_scores", f"the scores are scaled by {fmt(factor)} as the "
                    f"module's config declares ({where}), not by 1/sqrt(head_dim) = {fmt(usual)}; deliberate, so "
                    f"the weights and context differ from the reference's from here on.")]



# -- attention without a softmax ----------------------------------------------------------------------

_FEATURE_MAPS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "elu + 1, a non-negative kernel": lambda x: F.elu(x) + 1,
    "the identity, so the weights can be negative (the scores normalised by their row sums)": lambda x: x,
}


def linear_attention(p: Pair) -> list[Finding]:
    """A context that is phi(q) phi(k)^T, causal, normalised per row or not, times the values."""
    s = p.v.stages
    if "weights" in s or not all(stage in s for stage in ("queries", "keys", "values", "context")):
        return []
    queries, keys, values, context = (s[stage] for stage in ("queries", "keys", "values", "context"))
    if queries.dim() != 4 or keys.shape[1] == 0 or queries.shape[1] % keys.shape[1]:
        return []
    group = queries.shape[1] // keys.shape[1]  # query heads per key/value head
    if keys.shape[:3] != values.shape[:3] or context.shape[:3] != queries.shape[:3] or queries.shape[-1] != keys.shape[-1]:
        return []
    n = queries.shape[-2]
    causal = torch.ones(n, n, dtype=torch.bool).tril()
    tol = 1e-4 * max(max_abs(context), 1e-12) + 1e-6
    for name, phi in _FEATURE_MAPS.items():
        for normalised in (True, False):
            if all(_kernel_attention(phi, normalised, causal, queries[b, h].double(), keys[b, h // group].double(),
                                     values[b, h // group].double(), context[b, h].double(), tol)
                   for b, h in _heads(queries)):
                rows = "normalised to sum 1 per row" if normalised else "not normalised (rows do not sum to 1)"
                return [finding("not_softmax", "weights", f"the weights are not a softmax of the scaled "
                                f"scores: the context is linear attention's, weights phi(q_i) . phi(k_j) over the "
                                f"keys j <= i with phi = {name}, {rows}; the module never makes the weights "
                                f"(running sums over the tokens), so they cannot be shown. Deliberate in linear "
                                f"attention; use torch.softmax(attn_scores / keys.shape[-1] ** 0.5, dim=-1) for "
                                f"the reference's attention.")]
    return []


def _kernel_attention(phi: Callable[[torch.Tensor], torch.Tensor], normalised: bool, causal: torch.Tensor,
                      q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, context: torch.Tensor, tol: float) -> bool:
    """Whether one head's context is (phi(q) phi(k)^T, causal, per-row normalised or not) @ v."""
    kernel = (phi(q) @ phi(k).T).masked_fill(~causal, 0.0)  # (tokens, tokens)
    weights = kernel / kernel.sum(dim=-1, keepdim=True) if normalised else kernel
    return bool((weights @ v - context).abs().max() <= tol)
