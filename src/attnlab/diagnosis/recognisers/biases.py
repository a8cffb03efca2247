"""Masks and biases on the softmax input: a sliding window, a bias on the query-key distance (ALiBi)."""

from __future__ import annotations

import math
from collections.abc import Iterator

import torch

from attnlab.diagnosis.context import Pair
from attnlab.diagnosis.finding_code import Code, finds
from attnlab.diagnosis.message_format import fmt
from attnlab.diagnosis.recognisers.recogniser import EPS, ROWS, each_head, recogniser
from attnlab.record import Finding

WINDOW = Code(
    "window", ("scaled_scores",), "info",
    "each query sees its last w keys, itself included",
    "a sliding window of {window}: each query sees the last {window} keys, itself included (token {last} sees "
    "{seen}); the keys further back are -inf like the future ones, so their weights are 0 and each row of the "
    "weights still sums to 1.",
    "each query sees its last w keys, itself included; reports w",
    ("sliding_window",), "deliberate")

POSITION_BIAS = Code(
    "position_bias", ("scaled_scores",), "info",
    "the softmax input plus a bias that depends only on the query-key distance (ALiBi)",
    "a position bias: the softmax input is the reference's scaled scores plus a bias that depends only on the "
    "query-key distance (measured from each query's own key: a constant added to a whole row changes no weight), per "
    "head, {what}; the weights and context differ from the reference's from here on.",
    "the softmax input is the reference's plus a bias that depends only on the query–key distance, per head; reports "
    "the slope per head when linear (and says when they are ALiBi's published slopes)",
    ("alibi",), "deliberate")


SCORE_TERMS = Code(
    "score_terms", ("scaled_scores",), "info",
    "the class adds a term it computes itself to its scaled scores (relative-position logits, a learned bias)",
    "the class adds a term it computes from its own inputs or weights to the scaled scores before the softmax (a "
    "relative-position logit, a learned or content-dependent bias): the softmax input is {factor} * scores + that "
    "term, the factor read from the class's own operations; the weights and context differ from the reference's "
    "from here on.",
    "the softmax input is the variant's scores times a factor plus a term the class computes from its own inputs "
    "or weights (ViTS's and Wav2Vec2-BERT's relative-position logits, Doge's dynamic mask, WavLM's gated bias); the "
    "factor is read from the operations on the scores, so a wrong scale under the term is still a `scaling` error",
    ("tests/modules/test_hf_score_terms.py::test_the_library_class_gives_no_error_finding",), "deliberate")


@finds(SCORE_TERMS)
@recogniser
def score_terms(p: Pair) -> list[Finding]:
    factor = p.v.score_terms
    if factor is None or p.ref.score_terms is not None or not p.changed("scaled_scores"):
        return []
    return [SCORE_TERMS("scaled_scores", factor=float(factor))]


@finds(WINDOW)
@recogniser
def window(p: Pair) -> list[Finding]:
    pair = p.both("scaled_scores")
    if pair is None or pair[0].dim() != 4 or not p.changed("scaled_scores"):
        return []
    mine, ref = pair
    n_query, n_key = mine.shape[-2:]
    future = torch.ones(n_query, n_key, dtype=torch.bool, device=mine.device).triu(1)
    if n_query != n_key or not all(torch.equal(torch.isneginf(ref[i]), future) for i in each_head(ref)):
        return []  # a window is read against the reference's causal mask
    window = 0
    for i in each_head(mine):  # the widest row of any head; one that sees every key ends it
        window = max(window, int((~torch.isneginf(mine[i])).sum(dim=-1).max()))
        if window >= n_key:
            return []
    hidden = future | torch.ones_like(future).tril(-window)
    weights = p.v.stages.get("weights")
    for i in each_head(mine):
        if not torch.equal(torch.isneginf(mine[i]), hidden) or (weights is not None and bool(weights[i][hidden].any())):
            return []
    last = n_query - 1
    seen = ", ".join(str(t) for t in range(last - window + 1, last + 1))
    return [WINDOW("scaled_scores", window=window, last=last, seen=seen)]


def _changed_softmax_input(p: Pair) -> tuple[torch.Tensor, torch.Tensor] | None:
    """The variant's and the reference's softmax inputs when they differ by more than rounding with
    the same -inf entries (the mask kept as it was)."""
    pair = p.both("scaled_scores")
    if pair is None or pair[0].dim() != 4 or not p.changed("scaled_scores"):
        return None
    if not all(torch.equal(torch.isneginf(pair[0][i]), torch.isneginf(pair[1][i])) for i in each_head(pair[0])):
        return None
    return pair


def _declared_rescale(p: Pair) -> float:
    """The variant's declared scale over the reference's (1 where it declares none): the reference's
    softmax input as the variant's scale would make it."""
    keys = p.ref.stages.get("keys")
    if p.v.declared_scale is None or keys is None:
        return 1.0
    theirs = p.ref.declared_scale[0] if p.ref.declared_scale else keys.shape[-1] ** -0.5
    return p.v.declared_scale[0] / theirs


def _scores_tolerance(p: Pair) -> float:
    """What two computations of the softmax input may differ by, the variant's own terms included."""
    scaled = p.v.stages["scaled_scores"]
    largest = max(float(torch.where(torch.isfinite(scaled[i]), scaled[i].abs(), 0).max()) for i in each_head(scaled))
    return 8 * p.tolerance("scaled_scores") + 8 * EPS * largest


def _published_alibi_slopes(num_heads: int) -> list[float]:
    """ALiBi's slopes (Press et al., 2022): 2 ** (-8 (h + 1) / n) for n heads a power of two;
    otherwise those of the power of two below n, then every other slope of twice that power."""
    below = 2 ** int(math.floor(math.log2(num_heads)))
    slopes = [2 ** (-8 * (h + 1) / below) for h in range(below)]
    return slopes + [2 ** (-8 * (h + 1) / (2 * below)) for h in range(0, 2 * below, 2)][: num_heads - below]


def _distance_bias(mine: torch.Tensor, ref: torch.Tensor, tol: float) -> dict[int, float] | None:
    """{query - key: the bias} when mine - ref on one head depends only on the query-key distance."""
    n_query, n_key = mine.shape
    if not _shift_invariant(mine[:ROWS + 1], ref[:ROWS + 1], 2 * tol, n_key - n_query):
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
    for start in range(0, mine.shape[0], ROWS):
        diff = _anchored(mine[start:start + ROWS].double() - ref[start:start + ROWS], start, n_key - mine.shape[0])
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


@finds(POSITION_BIAS)
@recogniser
def position_bias(p: Pair) -> list[Finding]:
    pair = _changed_softmax_input(p)
    if pair is None:
        return []
    mine, ref = pair
    ref = ref * _declared_rescale(p)  # a bias on top of the scale the class declares (Pix2Struct's 1.0, T5's)
    tol = _scores_tolerance(p)
    biases: list[dict[int, float]] = []
    for b, h in each_head(mine):
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
    linear = [s for s in slopes if s is not None]
    if len(linear) == len(slopes):
        published = _published_alibi_slopes(heads)
        alibi = all(abs(-s - want) <= 1e-3 * want for s, want in zip(linear, published))
        per_head = ", ".join(f"head {h}: {fmt(-s)}" for h, s in enumerate(linear))
        what = (f"linear in the distance, as ALiBi: bias = -slope * (query - key) with slope {per_head}"
                + (f" (the published ALiBi slopes for {heads} heads)" if alibi else ""))
    else:
        shown = "; ".join(f"head {h}: " + ", ".join(f"{d}: {fmt(v)}" for d, v in sorted(bias.items()) if 0 <= d < 4)
                          for h, bias in enumerate(biases[:2]))
        what = f"not linear in the distance (bias by distance {shown}{' ...' if heads > 2 else ''})"
    return [POSITION_BIAS("scaled_scores", what=what)]
