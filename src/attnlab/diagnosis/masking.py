"""What counts as a mask: the one definition every check and diagnostic reads (issues 22, 24).

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
from dataclasses import replace

import torch

from attnlab.capture.recorder import Capture
from attnlab.diagnosis.passes import Peaks, blocks


def _scale(scores: torch.Tensor, scaled: torch.Tensor, weights: torch.Tensor) -> float:
    """The factor c in scaled = c * scores over the entries with weight (no mask is there)."""
    dot = norm = 0.0
    for i in blocks(scores):
        kept = (weights[i] > 0) & (scaled[i].abs() < math.inf) & (scores[i].abs() < math.inf)
        s, t = torch.where(kept, scores[i], 0.0).reshape(-1), torch.where(kept, scaled[i], 0.0).reshape(-1)
        dot, norm = dot + float(torch.dot(s, t)), norm + float(torch.dot(s, s))  # float64 across blocks
    return dot / norm if norm > 0 else math.nan


def masked_entries(scaled: torch.Tensor, weights: torch.Tensor, scores: torch.Tensor, scale: float) -> torch.Tensor:
    """Where a block of the softmax input is masked: its weight exactly 0 and its value put there,
    -inf or a fill that is not `scale` x its unmasked score (a score too small for exp() to reach is)."""
    zero = (weights == 0) & (scaled < math.inf)  # NaN compares False
    own = scores * scale  # what each entry would be without a mask
    return zero & (torch.isneginf(scaled) | ((scaled - own).abs() > 1e-3 * own.abs() + 1e-6))


def _softmax_input(capture: Capture) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None:
    """scaled_scores, weights and scores, when all three have one shape."""
    s = capture.stages
    scaled, weights, scores = s.get("scaled_scores"), s.get("weights"), s.get("scores")
    if scaled is None or weights is None or scores is None or scaled.numel() == 0:
        return None
    return (scaled, weights, scores) if scaled.shape == weights.shape == scores.shape else None


def with_masks_as_neg_inf(capture: Capture) -> Capture:
    """The capture with every masked entry of its softmax input at -inf (itself, no copy, when every
    mask already is -inf). Without the unmasked scores a finite fill cannot be told from a score
    exp() underflows on, and only -inf counts."""
    found = _softmax_input(capture)
    if found is None:
        return capture
    scaled, weights, scores = found
    if not any(bool(((weights[i] == 0) & (scaled[i].abs() < math.inf)).any()) for i in blocks(scaled)):
        return capture  # no finite entry with weight 0: any mask is -inf already
    scale = _scale(scores, scaled, weights)
    if not math.isfinite(scale):
        return capture
    fills = []  # (block, its finite masked entries)
    for i in blocks(scaled):
        hidden = masked_entries(scaled[i], weights[i], scores[i], scale) & ~torch.isneginf(scaled[i])
        if bool(hidden.any()):
            fills.append((i, hidden))
    if not fills:
        return capture  # weights of 0 where exp() underflowed: no mask
    masked = scaled.clone()  # (b, nh, T, T): the fills rewritten, the capture's own tensor untouched
    for i, hidden in fills:
        masked[i].masked_fill_(hidden, -math.inf)
    return replace(capture, stages={**capture.stages, "scaled_scores": masked})


def placed_by_mask(capture: Capture, stage: str) -> int:
    """How many -inf entries of `stage` (scores or scaled_scores) a mask placed: those whose weight is 0."""
    values, weights = capture.stages.get(stage), capture.stages.get("weights")
    if values is None or weights is None or values.shape != weights.shape:
        return 0
    return sum(int((torch.isneginf(values[i]) & (weights[i] == 0)).sum()) for i in blocks(values))


def same_everywhere(values: torch.Tensor, pattern: torch.Tensor) -> bool:
    """Whether every (batch, head) matrix of `values` is -inf exactly where `pattern` is True, one
    matrix at a time (no stage-sized boolean temporaries)."""
    lead = itertools.product(*(range(n) for n in values.shape[:-2]))
    return all(torch.equal(torch.isneginf(values[index]), pattern) for index in lead)


def mask_count(capture: Capture, measured: Peaks) -> int:
    """The masked entries of a softmax input that is a clean mask: no NaN or +inf in it, finite
    weights, every -inf's weight 0; else 0 (what is left is a non_finite finding's)."""
    scaled, weights = capture.stages.get("scaled_scores"), capture.stages.get("weights")
    if scaled is None or weights is None or scaled.shape != weights.shape or scaled.numel() == 0:
        return 0
    lo, hi = (float(v) for v in torch.aminmax(scaled))  # one pass: NaN shows in both, +inf in hi
    if lo != -math.inf or math.isnan(hi) or hi == math.inf or not math.isfinite(measured.peak["weights"]):
        return 0
    count = 0
    for i in blocks(scaled):  # a (rows, key) block at a time: no stage-sized temporaries
        hidden = torch.isneginf(scaled[i])
        if bool(torch.where(hidden, weights[i], 0.0).any()):
            return 0
        count += int(hidden.sum())
    return count


def reference_mask(variant: Capture, reference: Capture, measured: Peaks) -> torch.Tensor | None:
    """The reference's (query, key) mask, when it hides the same keys in every batch item and head
    and the variant's softmax input has the same (query, key) size."""
    mine, ref = variant.stages.get("scaled_scores"), reference.stages.get("scaled_scores")
    if mine is None or ref is None or mine.shape[-2:] != ref.shape[-2:] or math.isfinite(measured.peak["scaled_scores"]):
        return None  # no -inf at all in the reference: no mask
    pattern = torch.isneginf(ref[(0,) * (ref.dim() - 2)])  # (query, key) of the first batch item and head
    return pattern if pattern.any() and same_everywhere(ref, pattern) else None


def hides_nothing(capture: Capture, measured: Peaks) -> bool:
    """Whether the capture's softmax input holds no -inf (a finite fill, or no mask at all)."""
    return math.isfinite(measured.peak["scaled_scores"]) or not bool(torch.isneginf(capture.stages["scaled_scores"]).any())
