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
from attnlab.diagnosis.passes import blocks, max_abs


def _scale(scores: torch.Tensor, scaled: torch.Tensor, weights: torch.Tensor) -> float:
    """The factor c in scaled = c * scores over the entries with weight (no mask is there)."""
    dot = norm = 0.0
    for i in blocks(scores):
        kept = (weights[i] > 0) & (scaled[i].abs() < math.inf) & (scores[i].abs() < math.inf)
        s, t = scores[i].double()[kept], scaled[i].double()[kept]
        dot, norm = dot + float(s @ t), norm + float(s @ s)
    return dot / norm if norm > 0 else math.nan


def masked_entries(scaled: torch.Tensor, weights: torch.Tensor, scores: torch.Tensor | None = None,
                   scale: float = math.nan) -> torch.Tensor:
    """Where a block of the softmax input is masked: its weight exactly 0 and its value put there
    (-inf, or a fill: not c * scores, which a score too small for exp() to reach would be)."""
    hidden = torch.isneginf(scaled) & (weights == 0)
    if scores is None or not math.isfinite(scale):
        return hidden
    own = scale * scores.double()  # what the entry would be without a mask
    filled = (scaled.double() - own).abs() > 1e-3 * own.abs() + 1e-6
    return hidden | ((weights == 0) & (scaled.abs() < math.inf) & filled)


def _softmax_pair(capture: Capture) -> tuple[torch.Tensor, torch.Tensor] | None:
    scaled, weights = capture.stages.get("scaled_scores"), capture.stages.get("weights")
    if scaled is None or weights is None or scaled.shape != weights.shape or scaled.numel() == 0:
        return None
    return scaled, weights


def with_masks_as_neg_inf(capture: Capture) -> Capture:
    """The capture with every masked entry of its softmax input at -inf (itself when every mask
    already is -inf: no copy). Without the unmasked scores a finite fill cannot be told from a
    score exp() underflows on, and only -inf counts."""
    pair = _softmax_pair(capture)
    scores = capture.stages.get("scores")
    if pair is None or scores is None or scores.shape != pair[0].shape:
        return capture
    scaled, weights = pair
    if not any(bool(((weights[i] == 0) & (scaled[i].abs() < math.inf)).any()) for i in blocks(scaled)):
        return capture  # no finite entry with weight 0: any mask is -inf already
    scale = _scale(scores, scaled, weights)
    masked = scaled.clone()  # (b, nh, T, T): the fills rewritten, the capture's own tensor untouched
    for i in blocks(scaled):
        masked[i].masked_fill_(masked_entries(scaled[i], weights[i], scores[i], scale), -math.inf)
    return replace(capture, stages={**capture.stages, "scaled_scores": masked})


def placed_by_mask(capture: Capture, stage: str) -> int:
    """How many -inf entries of `stage` (scores or scaled_scores) a mask placed: those whose weight is 0."""
    values, weights = capture.stages.get(stage), capture.stages.get("weights")
    if values is None or weights is None or values.shape != weights.shape or math.isfinite(max_abs(values)):
        return 0
    return sum(int((torch.isneginf(values[i]) & (weights[i] == 0)).sum()) for i in blocks(values))


def same_everywhere(values: torch.Tensor, pattern: torch.Tensor) -> bool:
    """Whether every (batch, head) matrix of `values` is -inf exactly where `pattern` is True, one
    matrix at a time (no stage-sized boolean temporaries)."""
    lead = itertools.product(*(range(n) for n in values.shape[:-2]))
    return all(torch.equal(torch.isneginf(values[index]), pattern) for index in lead)


def mask_count(capture: Capture) -> int:
    """The masked entries of a softmax input that is a clean mask: no NaN or +inf in it, finite
    weights, every -inf's weight 0; else 0 (what is left is a non_finite finding's)."""
    pair = _softmax_pair(capture)
    if pair is None:
        return 0
    scaled, weights = pair
    lo, hi = (float(v) for v in torch.aminmax(scaled))  # one pass: NaN shows in both, +inf in hi
    if lo != -math.inf or math.isnan(hi) or hi == math.inf or not math.isfinite(max_abs(weights)):
        return 0
    count = 0
    for i in blocks(scaled):  # a (rows, key) block at a time: no stage-sized temporaries
        hidden = torch.isneginf(scaled[i])
        if bool(torch.where(hidden, weights[i], 0.0).any()):
            return 0
        count += int(hidden.sum())
    return count


def reference_mask(variant: Capture, reference: Capture) -> torch.Tensor | None:
    """The reference's (query, key) mask, when it hides the same keys in every batch item and head
    and the variant's softmax input has the same (query, key) size."""
    mine, ref = variant.stages.get("scaled_scores"), reference.stages.get("scaled_scores")
    if mine is None or ref is None or mine.shape[-2:] != ref.shape[-2:] or math.isfinite(max_abs(ref)):
        return None  # no -inf at all in the reference: no mask
    pattern = torch.isneginf(ref[(0,) * (ref.dim() - 2)])  # (query, key) of the first batch item and head
    return pattern if pattern.any() and same_everywhere(ref, pattern) else None


def hides_nothing(capture: Capture) -> bool:
    """Whether the capture's softmax input holds no -inf (a finite fill, or no mask at all)."""
    scaled = capture.stages["scaled_scores"]
    return math.isfinite(max_abs(scaled)) or not bool(torch.isneginf(scaled).any())
