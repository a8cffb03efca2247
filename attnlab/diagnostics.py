"""Numbers that describe a captured variant, alone and against the reference.

Everything that needs an (n x n) temporary runs in row blocks, so a 16384-token run needs
O(block * n) memory above the stage tensors themselves; float32 stays float32 and sums that
lose precision accumulate in float64. Tolerances are relative to float32 precision and the
values' scale, so a correct variant written another way (einsum, nn.Linear) is not "divergent".
"""

from __future__ import annotations

import math
from typing import Callable, Iterator

import torch

from attnlab.capture import Capture
from attnlab.stages import STAGES

BLOCK_ROWS = 1024
NAN = float("nan")
_EPS = float(torch.finfo(torch.float32).eps)


def row_blocks(n: int, block: int = BLOCK_ROWS) -> Iterator[slice]:
    for start in range(0, n, block):
        yield slice(start, min(start + block, n))


def max_abs(t: torch.Tensor) -> float:
    """max |t| without an |t| temporary."""
    if t.numel() == 0:
        return 0.0
    lo, hi = torch.aminmax(t)
    return max(-float(lo), float(hi))


def max_abs_diff(a: torch.Tensor, b: torch.Tensor) -> float:
    """max |a - b| in row blocks; nan when the shapes differ or a value is not finite. A tensor
    against itself (the reference's own diagnostics) is 0 without a pass over n x n values."""
    if a is b:
        return 0.0
    if a.shape != b.shape:
        return NAN
    if a.dim() < 2:
        return float((a - b).abs().max()) if a.numel() else 0.0
    return max((float((a[r] - b[r]).abs().max()) for r in row_blocks(a.shape[0])), default=0.0)


def _non_finite(t: torch.Tensor) -> float:
    if t.dim() < 2:
        return float((~torch.isfinite(t)).sum())
    return float(sum(int((~torch.isfinite(t[r])).sum()) for r in row_blocks(t.shape[0])))


def _stage_rtol(stage: str, capture: Capture) -> float:
    """Relative float32 error a correct computation of `stage` may carry (worst case, linear in K).

    Projections sum over d_in, scores over d_k; each later stage inherits the error before it.
    """
    x = capture.stages["inputs"]
    d_in = x.shape[-1]
    keys = capture.stages.get("keys")
    d_k = keys.shape[-1] if keys is not None else d_in
    projection = 4 * _EPS * (d_in + 1)
    scores = 2 * projection + 4 * _EPS * (d_k + 1)
    return {"inputs": _EPS, "queries": projection, "keys": projection, "values": projection,
            "scores": scores, "scaled_scores": scores + 4 * _EPS}.get(stage, scores)


def stage_tolerance(stage: str, capture: Capture) -> float:
    """Absolute tolerance for comparing `stage` of `capture` with another computation of it.

    A softmax turns an absolute error e in its input into a relative error of about 2e in its
    output, so the weights and context tolerances grow with the scaled scores' magnitude:
    when float32 cannot resolve the weights, the comparison says so instead of guessing.
    """
    stages = capture.stages
    atol = 1e-6
    if stage not in ("weights", "context"):
        return _stage_rtol(stage, capture) * max_abs(stages[stage]) + atol
    logits = stages.get("scaled_scores", stages.get("scores"))
    logit_err = _stage_rtol("scaled_scores", capture) * max_abs(logits) if logits is not None else 0.0
    weight_err = min(1.0, 2 * logit_err + 8 * _EPS * math.sqrt(stages["inputs"].shape[0]))
    if stage == "weights":
        return weight_err + atol
    values = stages.get("values")
    value_scale = max_abs(values) if values is not None else max_abs(stages["context"])
    return (2 * weight_err + _stage_rtol("values", capture)) * value_scale + atol


def stage_differs(stage: str, variant: Capture, reference: Capture, other: torch.Tensor | None = None) -> bool:
    """Whether `other` (default: the variant's stage) differs from the reference's stage."""
    mine = variant.stages[stage] if other is None else other
    ref = reference.stages[stage]
    if mine.shape != ref.shape:
        return True
    diff = max_abs_diff(mine, ref)
    return not diff <= stage_tolerance(stage, reference)


def first_divergent_stage(variant: Capture, reference: Capture) -> str | None:
    """The first stage, in pipeline order, whose values differ from the reference's.

    A shape mismatch counts as divergent; a stage missing from either capture is skipped.
    """
    for stage in STAGES:
        if stage in variant.stages and stage in reference.stages and stage_differs(stage, variant, reference):
            return stage
    return None


def _sum_rows(t: torch.Tensor, fn: Callable[[torch.Tensor], torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    """Row-wise sums of fn(block) and column sums of the block, both float64, in row blocks."""
    rows, cols = [], torch.zeros(t.shape[1], dtype=torch.float64)
    for r in row_blocks(t.shape[0]):
        block = t[r].double()
        rows.append(fn(block).sum(dim=1))
        cols += block.sum(dim=0)
    return torch.cat(rows), cols


def _weights_diagnostics(weights: torch.Tensor | None) -> dict[str, float]:
    names = ["weights_row_sum_max_err", "weights_col_sum_max_err", "weights_min", "weights_max",
             "weights_entropy_mean", "weights_entropy_norm_mean", "weights_row_max_mean", "weights_first_token_mass"]
    if weights is None or weights.dim() != 2 or weights.numel() == 0:
        return dict.fromkeys(names, NAN)
    row_sums, col_sums = _sum_rows(weights, lambda b: b)
    entropy = -_sum_rows(weights, lambda b: torch.special.xlogy(b, b))[0]
    lo, hi = torch.aminmax(weights)
    n_keys = weights.shape[1]
    return {
        "weights_row_sum_max_err": float((row_sums - 1).abs().max()),
        "weights_col_sum_max_err": float((col_sums - 1).abs().max()),
        "weights_min": float(lo),
        "weights_max": float(hi),
        "weights_entropy_mean": float(entropy.mean()),
        "weights_entropy_norm_mean": float(entropy.mean() / math.log(n_keys)) if n_keys > 1 else NAN,
        "weights_row_max_mean": float(weights.amax(dim=1).double().mean()),
        "weights_first_token_mass": float(weights[:, 0].double().mean()),
    }


def _scale_observed(scores: torch.Tensor | None, scaled: torch.Tensor | None) -> float:
    """Least-squares factor c in scaled_scores ~ c * scores (float64 sums, row blocks), over the
    entries finite in both: a mask's -inf says nothing about the scaling."""
    if scores is None or scaled is None or scores.shape != scaled.shape or scores.dim() != 2:
        return NAN
    dot = norm = 0.0
    for r in row_blocks(scores.shape[0]):
        s, t = scores[r].double(), scaled[r].double()
        finite = torch.isfinite(s) & torch.isfinite(t)
        s, t = torch.where(finite, s, 0.0), torch.where(finite, t, 0.0)
        dot += float((s * t).sum())
        norm += float((s * s).sum())
    return dot / norm if norm > 0 else NAN


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float) -> torch.Tensor:
    """softmax(q @ k.T * scale) @ v, for a block of query rows."""
    return torch.softmax(q @ k.T * scale, dim=-1) @ v


def _batched_single(capture: Capture) -> float:
    """The source's check for every token: each row of the batched context against the same
    token's single computation from the variant's own queries, keys and values."""
    s = capture.stages
    if not all(name in s for name in ("queries", "keys", "values")):
        return NAN
    q, k, v, context = s["queries"], s["keys"], s["values"], s["context"]
    if q.shape[-1] != k.shape[-1] or k.shape[0] != v.shape[0] or context.shape != (q.shape[0], v.shape[-1]):
        return NAN
    scale = k.shape[-1] ** -0.5
    return max(max_abs_diff(attention(q[r], k, v, scale), context[r]) for r in row_blocks(q.shape[0]))


def softmax_max_err(capture: Capture) -> float:
    """max |weights - softmax(scaled scores, over the keys)|; without a softmax input, the
    scores scaled by 1/sqrt(d_k) stand in for it (a hand-written softmax must match that)."""
    s = capture.stages
    weights = s.get("weights")
    if weights is None or weights.dim() != 2:
        return NAN
    logits, scale = s.get("scaled_scores"), 1.0
    if logits is None and "scores" in s and "keys" in s:
        logits, scale = s["scores"], s["keys"].shape[-1] ** -0.5
    if logits is None or logits.shape != weights.shape:
        return NAN
    return max(max_abs_diff(torch.softmax(logits[r] * scale, dim=-1), weights[r]) for r in row_blocks(weights.shape[0]))


def expected_shapes(variant: Capture, reference: Capture) -> dict[str, tuple[int, int]]:
    """Shapes predicted from n_tokens, d_in and d_out (the reference context's columns)."""
    n, d_in = variant.stages["inputs"].shape
    d_out = reference.stages["context"].shape[-1]
    predicted = {"inputs": (n, d_in), "scores": (n, n), "scaled_scores": (n, n), "weights": (n, n)}
    return {**predicted, **dict.fromkeys(("queries", "keys", "values", "context"), (n, d_out))}


def compute_diagnostics(variant: Capture, reference: Capture) -> dict[str, float]:
    """Flat {name: float} for the record and sweep tables; nan where not computable."""
    out: dict[str, float] = {}
    shapes = expected_shapes(variant, reference)
    for stage in STAGES:
        mine, ref = variant.stages.get(stage), reference.stages.get(stage)
        diff = max_abs_diff(mine, ref) if mine is not None and ref is not None else NAN
        scale = max_abs(ref) if ref is not None else NAN
        out[f"divergence_{stage}"] = diff
        out[f"relative_divergence_{stage}"] = diff / scale if scale > 0 else NAN
        out[f"non_finite_{stage}"] = _non_finite(mine) if mine is not None else NAN
        out[f"shape_ok_{stage}"] = float(tuple(mine.shape) == shapes[stage]) if mine is not None else NAN
    out.update(_weights_diagnostics(variant.stages.get("weights")))
    out["weights_softmax_max_err"] = softmax_max_err(variant)
    out["scale_observed"] = _scale_observed(variant.stages.get("scores"), variant.stages.get("scaled_scores"))
    keys = variant.stages.get("keys")
    out["scale_expected"] = keys.shape[-1] ** -0.5 if keys is not None else NAN
    out["softmax_dim"] = float(variant.softmax_dim) if variant.softmax_dim is not None else NAN
    out["batched_single_max_abs_diff"] = _batched_single(variant)
    return out
