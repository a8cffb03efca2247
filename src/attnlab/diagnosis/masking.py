"""What counts as a mask in the softmax input: the one definition every check and diagnostic reads.

A mask is -inf in the softmax input (scaled_scores) where the weights are exactly 0, with no NaN
or +inf anywhere in it and finite weights; anything else with -inf stays a non_finite finding.
"""

from __future__ import annotations

import itertools
import math

import torch

from attnlab.capture.recorder import Capture
from attnlab.diagnosis.diagnostics import blocks, max_abs


def same_everywhere(values: torch.Tensor, pattern: torch.Tensor) -> bool:
    """Whether every (batch, head) matrix of `values` is -inf exactly where `pattern` is True, one
    matrix at a time (no stage-sized boolean temporaries)."""
    lead = itertools.product(*(range(n) for n in values.shape[:-2]))
    return all(torch.equal(torch.isneginf(values[index]), pattern) for index in lead)


def mask_counts(capture: Capture, diagnostics: dict[str, float]) -> dict[str, int]:
    """-inf entries of the scores and the softmax input that are a mask (e.g. causal), by stage."""
    scaled, weights = capture.stages.get("scaled_scores"), capture.stages.get("weights")
    if scaled is None or weights is None or scaled.shape != weights.shape or scaled.numel() == 0:
        return {}
    lo, hi = (float(v) for v in torch.aminmax(scaled))  # one pass: NaN shows in both, +inf in hi
    if lo != -math.inf or math.isnan(hi) or hi == math.inf or not math.isfinite(max_abs(weights)):
        return {}
    count = 0
    for i in blocks(scaled):  # a (rows, key) block at a time: no stage-sized temporaries
        masked = torch.isneginf(scaled[i])
        if bool(torch.where(masked, weights[i], 0.0).any()):
            return {}
        count += int(masked.sum())
    counts = {"scaled_scores": count}
    scores = capture.stages.get("scores")
    if scores is not None and scores.shape == scaled.shape and diagnostics.get("non_finite_scores", 0) > 0:
        counts["scores"] = sum(int(torch.isneginf(scores[i]).sum()) for i in blocks(scores))
    return counts


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
