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

import itertools
import math
from dataclasses import dataclass, replace

import torch

from attnlab.capture.recorder import Capture
from attnlab.capture.spill import releasing
from attnlab.diagnosis.stage_blocks import Peaks, block_scratch, blocks, fitted, one_thread, row_blocks

MASK_GAP = 1e3  # below its row's largest by more: a softmax weight of exactly 0 in any float type (e^-745 underflows float64)


def fill_masked(attn_scores: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """(same shape, bool) where a mask is in a softmax input from its values alone, whatever its fill
    (-inf, torch.finfo(dtype).min, -1e9, -1e4 added to a score): -inf, or so far below its row's
    largest that its weight is 0 (a row of one fill throughout is no mask: its weights are uniform)."""
    row_max = attn_scores.amax(dim=dim, keepdim=True)  # -inf for a row masked whole: its cells are -inf
    return torch.isneginf(attn_scores) | (attn_scores < row_max - MASK_GAP)


def _scale(scores: torch.Tensor, scaled: torch.Tensor, weights: torch.Tensor) -> float:
    """The factor c in scaled = c * scores over the entries with weight (no mask is there). Each
    block's temporaries in one scratch tensor each; a side whose block is finite throughout (one
    aminmax says so) needs no mask of its finite entries."""
    dot = norm = 0.0
    kept_room = block_scratch(scores, torch.bool)
    sides = [(block_scratch(t, torch.result_type(t, 0.0)), torch.zeros((), dtype=torch.result_type(t, 0.0)))
             for t in (scores, scaled)]
    for i in blocks(scores):
        kept = torch.gt(weights[i], 0, out=fitted(kept_room, weights[i]))
        for t in (scaled[i], scores[i]):
            if t.numel() and not all(math.isfinite(float(end)) for end in torch.aminmax(t)):  # a NaN or an inf
                kept.logical_and_(torch.isfinite(t))
        s, t = (torch.where(kept, side[i], zero, out=fitted(room, side[i])).reshape(-1)
                for side, (room, zero) in zip((scores, scaled), sides))
        dot, norm = dot + float(torch.dot(s, t)), norm + float(torch.dot(s, s))  # float64 across blocks
    return dot / norm if norm > 0 else math.nan


def masked_fills(scaled: torch.Tensor, weights: torch.Tensor, scores: torch.Tensor, scale: float,
                 rooms: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
    """Where a block of the softmax input holds a finite mask fill: its weight exactly 0 and its
    value not `scale` x its unmasked score (a score too small for exp() to reach is). `rooms`: the
    temporaries' block_scratch (`fill_rooms`)."""
    own = torch.mul(scores, scale, out=fitted(rooms[0], scores))  # each entry without a mask
    gap = torch.sub(scaled, own, out=fitted(rooms[1], scores)).abs_()
    far = gap > own.abs_().mul_(1e-3).add_(1e-6)  # own's magnitude, in place once read
    return far.logical_and_(weights == 0).logical_and_(torch.isfinite(scaled))  # NaN is not finite


def fill_rooms(scaled: torch.Tensor, scores: torch.Tensor, scale: float) -> tuple[torch.Tensor, torch.Tensor]:
    """masked_fills' temporaries' room: scale x scores, and its gap to the softmax input, each in its own dtype."""
    own = torch.result_type(scores, scale)
    return block_scratch(scores, own), block_scratch(scores, torch.promote_types(scaled.dtype, own))


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
    scale = _scale(scores, scaled, weights)
    if not math.isfinite(scale):
        return capture
    rooms = fill_rooms(scaled, scores, scale)
    fills = [hidden if bool(hidden.any()) else None  # each block's finite masked entries
             for i in blocks(scaled) for hidden in [masked_fills(scaled[i], weights[i], scores[i], scale, rooms)]]
    if not any(hidden is not None for hidden in fills):
        return capture  # weights of 0 where exp() underflowed: no mask
    masked = torch.empty_like(scaled)  # (b, nh, T, T): the fills rewritten, the capture's own tensor untouched
    for i, hidden in zip(blocks(scaled), fills):  # one pass writes each block: its fills at -inf, else itself
        if hidden is None:
            masked[i].copy_(scaled[i])
        else:
            torch.where(hidden, neg_inf, scaled[i], out=masked[i])
    return replace(capture, stages={**capture.stages, "scaled_scores": masked})


@dataclass(frozen=True)
class NegInf:
    """The -inf of one stage of the softmax side (scores or scaled_scores), from one pass with the weights."""

    count: int = 0  # -inf entries
    placed: int = 0  # those a mask placed: their weight is 0
    clean: bool = True  # no NaN or +inf beside them
    pattern: torch.Tensor | None = None  # (query, key) where it is -inf, when the same in every batch item and head


def neg_infs(capture: Capture, measured: Peaks) -> dict[str, NegInf]:
    """NegInf of the capture's scores and scaled_scores; a stage whose peak is finite holds none."""
    weights = capture.stages.get("weights")
    return {stage: _neg_inf(capture.stages[stage], weights) if not math.isfinite(measured.peak[stage]) else NegInf()
            for stage in ("scores", "scaled_scores") if stage in capture.stages}


@releasing
def _neg_inf(values: torch.Tensor, weights: torch.Tensor | None) -> NegInf:
    paired = weights if weights is not None and weights.shape == values.shape else None
    matrix = values.dim() >= 2
    if not matrix:  # one row
        values, paired = values.reshape(1, -1), paired.reshape(1, -1) if paired is not None else None
    count = placed = 0
    clean, first, same = True, [], True  # first: the first (batch, head)'s -inf, a block of rows at a time
    for n, lead in enumerate(itertools.product(*(range(k) for k in values.shape[:-2]))):
        for k, rows in enumerate(row_blocks(values.shape[-2])):
            index: tuple[int | slice, ...] = (*lead, rows)
            block = values[index]  # (rows, key)
            hidden = torch.isneginf(block)
            n_hidden = int(hidden.count_nonzero())  # count_nonzero: a bool sum is several times slower
            weighted = int((hidden & paired[index].bool()).count_nonzero()) if paired is not None else n_hidden
            count, placed = count + n_hidden, placed + n_hidden - weighted
            clean = clean and float(block.amax()) < math.inf  # a NaN compares False
            if n == 0:
                first.append(hidden)
            elif same:
                same = torch.equal(hidden, first[k])
    return NegInf(count, placed, clean, torch.cat(first) if same and first and matrix else None)


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
