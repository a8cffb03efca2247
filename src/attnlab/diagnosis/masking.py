"""What counts as a mask: the one definition every check and diagnostic reads.

An entry of the softmax input (scaled_scores) is masked when its softmax weight is exactly 0,
whatever put it there: -inf, or a finite fill so negative that exp() gives 0
(`torch.finfo(dtype).min`, -1e9, -1e4), told from a large negative score exp() underflows on by
its value: a fill is not the module's own scale times the unmasked score. A masked entry counts
as -inf everywhere, so the
diagnosis first rewrites each capture's softmax input with its masked entries at -inf
(`with_masks_as_neg_inf`) and every later pass reads that. A -inf whose weight is not 0 (a row
hidden from every key: 0/0 = NaN) is no mask; it stays a non-finite value.
"""

from __future__ import annotations

import math
import threading
import weakref
from dataclasses import dataclass, replace

import torch

from attnlab.capture.recorder import Capture
from attnlab.capture.spill import releasing
from attnlab.diagnosis.stage_blocks import (
    BLOCK_ROWS,
    Peaks,
    block_scratch,
    blocks,
    fitted,
    max_abs,
    one_thread,
    remember_max_abs,
)

FILL_ROWS = 256  # the fill passes' blocks: their ~8 temporaries stay in a core's cache (BLOCK_ROWS' do not)
MASK_GAP = 1e3
# An entry 4x farther below 0 than any |scale x score| (+ 1e-6) is farther from its own than
# masked_fills' 1e-3 x |own| + 1e-6 in any float type's rounding (bfloat16's 2^-8 included): a fill.
FAR = 4.0  # below its row's largest by more: a softmax weight of exactly 0 in any float type (e^-745 underflows float64)


def fill_masked(attn_scores: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """(same shape, bool) where a mask is in a softmax input from its values alone, whatever its fill
    (-inf, torch.finfo(dtype).min, -1e9, -1e4 added to a score): -inf, or so far below its row's
    largest that its weight is 0 (a row of one fill throughout is no mask: its weights are uniform)."""
    row_max = attn_scores.amax(dim=dim, keepdim=True)  # -inf for a row masked whole: its cells are -inf
    return torch.isneginf(attn_scores) | (attn_scores < row_max - MASK_GAP)


def _ends(t: torch.Tensor) -> tuple[float, float]:
    """A block's (min, max), (0, 0) when empty: finite both when it holds no NaN or inf (one aminmax,
    where isfinite() writes a mask ~10x slower)."""
    if t.numel() == 0:
        return 0.0, 0.0
    lowest, highest = torch.aminmax(t)
    return float(lowest), float(highest)


def _finite(t: torch.Tensor) -> bool:
    return all(math.isfinite(end) for end in _ends(t))


def _nonnegative(weights: torch.Tensor) -> bool:
    """No weight below 0 and no NaN (min() keeps one): then weight > 0 is weight != 0, a cast to bool."""
    return weights.numel() == 0 or float(weights.min()) >= 0


@dataclass(frozen=True)
class _Fit:
    scale: float  # c in scaled = c * scores over the entries with weight
    signed: bool  # every block took _scale's sign path (all finite, weights non-negative)
    finite: list[bool]  # each scaled block free of NaN and inf
    scores_peak: float  # max |scores| from its blocks' ends, NaN unless every block of it is finite


def _scale(scores: torch.Tensor, scaled: torch.Tensor, weights: torch.Tensor) -> _Fit:
    """The factor c in scaled = c * scores over the entries with weight (no mask is there), read
    in one pass over blocks of FILL_ROWS rows (each block's ends measured while it is in cache). Each
    block's temporaries in one scratch tensor each; a side whose block is finite throughout (one
    aminmax says so) needs no mask of its finite entries, and where both are (and the weights are
    non-negative, in one dtype) the scores are multiplied by sign(weights) instead: the same products
    but for a zero's sign, which no sum of them keeps."""
    dot = norm = 0.0
    signed, finite_scaled, peak = True, [], 0.0
    kept_room = block_scratch(scores, torch.bool, FILL_ROWS)
    sides = [(block_scratch(t, torch.result_type(t, 0.0), FILL_ROWS), torch.zeros((), dtype=torch.result_type(t, 0.0)))
             for t in (scores, scaled)]
    one_dtype = scores.dtype == scaled.dtype == weights.dtype and scores.is_floating_point()
    for i in blocks(scores, FILL_ROWS):
        lowest, highest = _ends(scores[i])
        finite = [_finite(scaled[i]), math.isfinite(lowest) and math.isfinite(highest)]
        finite_scaled.append(finite[0])
        peak = max(peak, -lowest, highest) if finite[1] else math.nan  # NaN stays (max() keeps a first NaN)
        if one_dtype and all(finite) and _nonnegative(weights[i]):
            room = fitted(sides[0][0], scores[i])
            s = torch.sign(weights[i], out=room).mul_(scores[i]).reshape(-1)  # each score, 0 where no weight
            dot, norm = dot + float(torch.dot(s, scaled[i].reshape(-1))), norm + float(torch.dot(s, s))
            continue
        signed = False
        kept = torch.gt(weights[i], 0, out=fitted(kept_room, weights[i]))
        for t, ok in zip((scaled[i], scores[i]), finite):
            if not ok:  # a NaN or an inf
                kept.logical_and_(torch.isfinite(t))
        s, t = (torch.where(kept, side[i], zero, out=fitted(room, side[i])).reshape(-1)
                for side, (room, zero) in zip((scores, scaled), sides))
        dot, norm = dot + float(torch.dot(s, t)), norm + float(torch.dot(s, s))  # float64 across blocks
    return _Fit(dot / norm if norm > 0 else math.nan, signed, finite_scaled, peak)


def masked_fills(scaled: torch.Tensor, weights: torch.Tensor, scores: torch.Tensor, scale: float,
                 rooms: tuple[torch.Tensor, ...], finite: bool, far_below: float = math.nan
                 ) -> tuple[torch.Tensor, bool, bool]:
    """Where a block of the softmax input holds a finite mask fill: its weight exactly 0 and its
    value not `scale` x its unmasked score (a score too small for exp() to reach is). `rooms`: the
    temporaries' block_scratch (`fill_rooms`); the answer is in one of them, valid until the next
    call. `finite`: whether `scaled` holds no NaN or inf (_finite); `far_below`: a bound every
    entry of weight 0 at or below which is a fill whatever rounding does (FAR x |scale| x max |scores|):
    where all of them are, they are the answer without the comparison (the first bool says so; the
    second, that they are exactly the entries at or below far_below, rounded down into the block's dtype)."""
    unweighted = fitted(rooms[3], scores).copy_(weights).logical_not_()  # weights == 0, in a cast ~4x faster
    if finite and math.isfinite(far_below) and rooms[1].dtype == scaled.dtype:
        if scaled.dtype in (torch.float32, torch.float64):  # the usual block: weight 0 exactly where far below
            below = torch.le(scaled, _rounded_down(far_below, scaled.dtype), out=fitted(rooms[2], scores))
            if _same_bools(below, unweighted):  # a compare and a memcmp instead of a where() and its max
                return unweighted, True, True
        none = torch.full((), -math.inf, dtype=scaled.dtype)
        lowest = torch.where(unweighted, scaled, none, out=fitted(rooms[1], scores)).amax()
        if float(lowest) <= far_below:  # the largest entry of weight 0 (-inf when none is)
            return unweighted, True, False
    own = torch.mul(scores, scale, out=fitted(rooms[0], scores))  # each entry without a mask
    gap = torch.sub(scaled, own, out=fitted(rooms[1], scores)).abs_()
    far = torch.gt(gap, own.abs_().mul_(1e-3).add_(1e-6), out=fitted(rooms[2], scores))  # own's magnitude, in place
    far.logical_and_(unweighted)
    return far if finite else far.logical_and_(torch.isfinite(scaled)), False, False  # NaN is not finite


def _rounded_down(bound: float, dtype: torch.dtype) -> torch.Tensor:
    """The largest `dtype` value at or below `bound`: an entry x of that dtype is <= it exactly when x <= bound."""
    at = torch.tensor(bound, dtype=torch.float64).to(dtype)
    return at if float(at) <= bound else torch.nextafter(at, torch.tensor(-math.inf, dtype=dtype))


def fill_rooms(scaled: torch.Tensor, scores: torch.Tensor, scale: float) -> tuple[torch.Tensor, ...]:
    """masked_fills' temporaries' room: scale x scores, and its gap to the softmax input, each in its
    own dtype, and two masks."""
    own = torch.result_type(scores, scale)
    return (block_scratch(scores, own, FILL_ROWS), block_scratch(scores, torch.promote_types(scaled.dtype, own), FILL_ROWS),
            block_scratch(scores, torch.bool, FILL_ROWS), block_scratch(scores, torch.bool, FILL_ROWS))


def _softmax_input(capture: Capture) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None:
    """scaled_scores, weights and scores, when all three have one shape."""
    s = capture.stages
    scaled, weights, scores = s.get("scaled_scores"), s.get("weights"), s.get("scores")
    if scaled is None or weights is None or scores is None or scaled.numel() == 0:
        return None
    return (scaled, weights, scores) if scaled.shape == weights.shape == scores.shape else None


@one_thread()
@releasing
def with_masks_as_neg_inf(capture: Capture) -> Capture:
    """The capture with every masked entry of its softmax input at -inf (itself, no copy, when every
    mask already is -inf). Without the unmasked scores a finite fill cannot be told from a score
    exp() underflows on, and only -inf counts."""
    found = _softmax_input(capture)
    if found is None:
        return capture
    scaled, weights, scores = found
    dtype = scaled.dtype if scaled.is_floating_point() else torch.float32  # where()'s: -inf fits
    room, neg_inf = block_scratch(scaled, dtype), torch.full((), -math.inf, dtype=dtype)
    if all(float(torch.where(weights[i].bool(), neg_inf, scaled[i], out=fitted(room, scaled[i])).amax()) == -math.inf
           for i in blocks(scaled)):  # bool(): weight != 0
        return capture  # no finite entry with weight 0 (a NaN or +inf one takes the long way): any mask is -inf
    index = list(blocks(scaled, FILL_ROWS))
    fit = _scale(scores, scaled, weights)
    scale, signed, finite = fit.scale, fit.signed, fit.finite
    if not math.isfinite(scale):
        return capture
    if math.isfinite(fit.scores_peak):  # max_abs(scores) from the fit's pass: the same value
        remember_max_abs(scores, abs(fit.scores_peak))
    rooms = fill_rooms(scaled, scores, scale)
    far_below = -FAR * (abs(scale) * max_abs(scores) + 1e-6)  # nan where a score is: then compared entry by entry
    masked = None  # (b, nh, T, T): the fills rewritten, the capture's own tensor untouched; made at the first fill
    tally = _Tally(scaled.shape[-2], FILL_ROWS) if all(finite) and scaled.dim() >= 2 else None  # its -inf: the fills alone
    every_weightless = True  # each block's entries of weight 0 all fills
    for k, i in enumerate(index):  # one pass writes each block: its fills at -inf, else itself
        hidden, weightless, below = masked_fills(scaled[i], weights[i], scores[i], scale, rooms, finite[k], far_below)
        every_weightless = every_weightless and weightless
        n_fills = int(hidden.count_nonzero()) if tally is not None else int(hidden.numel() > 0 and bool(hidden.max()))
        if tally is not None:  # each fill's weight is 0 (masked_fills), and nothing else is NaN or inf
            tally.add(hidden, n_fills, 0, True)
        if masked is None and n_fills:
            masked = _room_like(scaled)
            for j in index[:k]:
                masked[j].copy_(scaled[j])
        if masked is not None and below:  # the same entries at -inf, in a vectorised pass ~3x faster than where()
            torch.threshold(scaled[i], float(_rounded_down(far_below, scaled.dtype)), -math.inf, out=masked[i])
        elif masked is not None and n_fills:
            torch.where(hidden, neg_inf, scaled[i], out=masked[i])
        elif masked is not None:
            masked[i].copy_(scaled[i])
    if masked is None:
        return capture  # weights of 0 where exp() underflowed: no mask
    if tally is not None:
        remember_max_abs(masked, math.inf)  # a fill is written, nothing is NaN
        _KNOWN[id(masked)] = tally.neg_inf(True)
        weakref.finalize(masked, _KNOWN.pop, id(masked), None)
    if signed and every_weightless and scaled.dtype in (torch.float32, torch.float64):  # not a coarser dot's sums
        # the entries finite in both are those with weight: scale_observed's fit is _scale's
        _FITTED[id(masked)] = (weakref.ref(scores), scale)
        weakref.finalize(masked, _FITTED.pop, id(masked), None)
    return replace(capture, stages={**capture.stages, "scaled_scores": masked})


SPARE_BYTES = 1 << 27  # a rewritten softmax input up to this size leaves its memory for the next layer's
# that memory and its storage's use count when nothing else holds it, per thread: runs in threads never share it
_spare = threading.local()
_use_count = getattr(torch._C, "_storage_Use_Count", None)


def _room_like(t: torch.Tensor) -> torch.Tensor:
    """empty_like(t), in the previous rewritten softmax input's memory once nothing holds it (no
    tensor, view or slice of it left: its storage's use count says so): every layer of a run
    rewrites one of the same size, and fresh memory is paged in zeroed by the kernel on first
    touch, a cost that grows with the square of the tokens."""
    if _use_count is None or not t.is_contiguous() or t.numel() * t.element_size() > SPARE_BYTES:
        return torch.empty_like(t)
    kept: tuple[torch.Tensor, int] | None = getattr(_spare, "kept", None)
    if kept is not None:
        base, free = kept
        if base.dtype == t.dtype and base.numel() == t.numel() and _use_count(base.untyped_storage()._cdata) == free:
            return base.view(t.shape)
    base = torch.empty(t.numel(), dtype=t.dtype)
    _spare.kept = (base, _use_count(base.untyped_storage()._cdata))
    return base.view(t.shape)


@dataclass(frozen=True)
class NegInf:
    """The -inf of one stage of the softmax side (scores or scaled_scores), from one pass with the weights."""

    count: int = 0  # -inf entries
    placed: int = 0  # those a mask placed: their weight is 0
    clean: bool = True  # no NaN or +inf beside them
    pattern: torch.Tensor | None = None  # (query, key) where it is -inf, when the same in every batch item and head


_KNOWN: dict[int, NegInf] = {}  # a softmax input with_masks_as_neg_inf wrote, by id while it lives: its NegInf
_FITTED: dict[int, tuple[weakref.ref[torch.Tensor], float]] = {}  # the same, where its fit is known: its scores, the factor


def fitted_scale(scores: torch.Tensor, scaled: torch.Tensor) -> float | None:
    """The least-squares c in scaled ~ c * scores over the entries finite in both, when
    with_masks_as_neg_inf wrote `scaled` from these scores and fitted it on the same entries (its
    -inf are exactly the entries of weight 0, everything else finite): the same sums in other blocks,
    equal to the last bits (benchmarks/README.md, the fused statistics)."""
    known = _FITTED.get(id(scaled))
    return known[1] if known is not None and known[0]() is scores else None


class _Tally:
    """A stage's NegInf summed block by block, in blocks()' order (each (batch item, head) in turn)."""

    def __init__(self, n_query: int, rows: int = BLOCK_ROWS):
        self.per_lead = len(range(0, n_query, rows))  # row blocks of each (batch item, head)
        self.count = self.placed = self.blocks = 0
        self.clean, self.same = True, True
        self.first: list[torch.Tensor] = []  # the first (batch, head)'s -inf, a block of rows at a time

    def add(self, hidden: torch.Tensor, n_hidden: int, weighted: int, clean: bool) -> None:
        """A block's -inf entries (`hidden`, valid for this call only), their count, those with weight, no NaN or +inf."""
        self.count, self.placed = self.count + n_hidden, self.placed + n_hidden - weighted
        self.clean = self.clean and clean
        lead, k = divmod(self.blocks, self.per_lead)
        if lead == 0:
            self.first.append(hidden.clone())
        elif self.same:
            self.same = _same_bools(hidden, self.first[k])
        self.blocks += 1

    def neg_inf(self, matrix: bool) -> NegInf:
        pattern = torch.cat(self.first) if self.same and self.first and matrix else None
        return NegInf(self.count, self.placed, self.clean, pattern)


def _same_bools(a: torch.Tensor, b: torch.Tensor) -> bool:
    """torch.equal of two bool tensors, compared 8 entries to an int64 where both are laid out for it
    (~7x faster than bool by bool: torch's bools are the bytes 0 and 1)."""
    whole = [t.is_contiguous() and t.numel() % 8 == 0 and t.storage_offset() % 8 == 0 for t in (a, b)]
    if a.shape == b.shape and all(whole):
        return torch.equal(a.reshape(-1).view(torch.int64), b.reshape(-1).view(torch.int64))
    return torch.equal(a, b)


def neg_infs(capture: Capture, measured: Peaks) -> dict[str, NegInf]:
    """NegInf of the capture's scores and scaled_scores; a stage whose peak is finite holds none, a
    softmax input with_masks_as_neg_inf rewrote is known."""
    weights = capture.stages.get("weights")
    return {stage: NegInf() if math.isfinite(measured.peak[stage])
            else _KNOWN.get(id(capture.stages[stage])) or _neg_inf(capture.stages[stage], weights)
            for stage in ("scores", "scaled_scores") if stage in capture.stages}


@releasing
def _neg_inf(values: torch.Tensor, weights: torch.Tensor | None) -> NegInf:
    paired = weights if weights is not None and weights.shape == values.shape else None
    matrix = values.dim() >= 2
    if not matrix:  # one row
        values, paired = values.reshape(1, -1), paired.reshape(1, -1) if paired is not None else None
    tally = _Tally(values.shape[-2])
    for index in blocks(values):
        block = values[index]  # (rows, key)
        hidden = torch.isneginf(block)
        n_hidden = int(hidden.count_nonzero())  # count_nonzero: a bool sum is several times slower
        weighted = int((hidden & paired[index].bool()).count_nonzero()) if paired is not None else n_hidden
        tally.add(hidden, n_hidden, weighted, float(block.amax()) < math.inf)  # a NaN compares False
    return tally.neg_inf(matrix)


def mask_count(capture: Capture, measured: Peaks, found: dict[str, NegInf]) -> int:
    """The masked entries of a softmax input that is a clean mask: no NaN or +inf in it, finite
    weights, every -inf's weight 0; else 0 (what is left is a non_finite finding's)."""
    scaled, weights = capture.stages.get("scaled_scores"), capture.stages.get("weights")
    if scaled is None or weights is None or scaled.shape != weights.shape or scaled.numel() == 0:
        return 0
    hidden = found["scaled_scores"]
    clean = hidden.clean and hidden.placed == hidden.count and math.isfinite(measured.peak["weights"])
    return hidden.count if clean else 0


def reference_mask(variant: Capture, reference: Capture, found: dict[str, NegInf]) -> torch.Tensor | None:
    """The reference's (query, key) mask (`found`: its neg_infs), when it hides the same keys in
    every batch item and head and the variant's softmax input has the same (query, key) size."""
    mine, ref = variant.stages.get("scaled_scores"), reference.stages.get("scaled_scores")
    if mine is None or ref is None or mine.shape[-2:] != ref.shape[-2:]:
        return None
    pattern = found["scaled_scores"].pattern
    return pattern if pattern is not None and bool(pattern.any()) else None  # no -inf at all: no mask
