"""Numbers that describe a captured variant, alone and against the reference.

Every stage is in the canonical view of `attnlab.capture.stages.AXES`; everything that needs a
(query x key) temporary runs per (batch item, head) in blocks of query rows, so a long run needs
O(block * n) memory above the stage tensors themselves. float32 stays float32 and sums that lose
precision accumulate in float64. Tolerances are relative to the dtype's precision (float32's, or
a coarser one the module ran in: bfloat16, float16) and the values' scale, so a correct variant
written another way (einsum, nn.Linear, fused QKV) is not "divergent".

Per-head values are kept per head (`head_diagnostics`); the flat table keeps the worst head for
error-type values (divergences, row-sum errors) and the mean over heads for entropy-type ones.
"""

from __future__ import annotations

import itertools
import math

import torch

from attnlab.capture.recorder import Capture, max_abs_or_nan
from attnlab.capture.spill import releasing
from attnlab.capture.stages import STAGES
from attnlab.diagnosis.kv_granularity import kv_head_of
from attnlab.diagnosis.masking import NegInf, fitted_scale, neg_infs
from attnlab.diagnosis.stage_blocks import (
    Peaks,
    block_scratch,
    blocks,
    finite_max_abs,
    fitted,
    max_abs,
    peaks,
    row_blocks,
)

NAN = float("nan")
_EPS = float(torch.finfo(torch.float32).eps)  # float32's; a capture in another dtype uses its own (capture_eps)
HEAD_COLUMNS = ("weights_entropy_mean", "weights_row_max_mean", "weights_first_token_mass")  # per-head table columns
OWN_STAGES = ("scores", "scaled_scores", "weights", "keys", "values", "context")  # what own_statistics reads


@releasing
def max_abs_diff(a: torch.Tensor, b: torch.Tensor, scratch: torch.Tensor | None = None) -> float:
    """max |a - b| in blocks; nan when the shapes differ or a value is not finite. A tensor
    against itself (the reference's own diagnostics) is 0 without a pass over its values.
    `scratch`: difference_scratch(a, b), when a caller compares many pairs of one shape (a fresh
    temporary for each costs more than the subtraction)."""
    if a is b:
        return 0.0
    if a.shape != b.shape:
        return NAN
    scratch = difference_scratch(a, b) if scratch is None else scratch
    return max((_gap(a[i], b[i], scratch) for i in blocks(a) if a[i].numel()), default=0.0)


def difference_scratch(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Room for a - b of one of a's blocks, in their common dtype."""
    return block_scratch(a, torch.promote_types(a.dtype, b.dtype))


def _gap(x: torch.Tensor, y: torch.Tensor, scratch: torch.Tensor) -> float:
    """max |x - y|, 0 where both hold the same value (a mask's -inf against the same -inf).

    Written into `scratch` where the block is finite; only a NaN in it (equal infinities, or a NaN
    value) pays for the comparison that tells the two apart, and blocks equal entry for entry (a
    mask's -inf on both sides) for one that stops at the first difference."""
    gap = torch.sub(x, y, out=fitted(scratch, x))
    worst = max_abs_or_nan(gap)
    if not math.isnan(worst):
        return worst
    if x.dtype == y.dtype and torch.equal(x, y):  # NaN is never equal: those take the long way
        return 0.0
    return float(torch.where(x == y, 0.0, gap.abs_()).max())


def finite_entries(t: torch.Tensor) -> torch.Tensor:
    """torch.isfinite(t), in two passes that CPU kernels vectorise (isfinite's own is ~3x slower);
    NaN compares false."""
    return t.abs() < math.inf


@releasing
def _non_finite(t: torch.Tensor, peak: float) -> float:
    """How many entries of t are NaN or inf; `peak`: its max |t|."""
    if math.isfinite(peak):
        return 0.0  # one pass without a temporary: a finite max |t| leaves no NaN or inf anywhere
    return float(t.numel() - sum(int(finite_entries(t[i]).count_nonzero()) for i in blocks(t)))


def capture_eps(capture: Capture) -> float:
    """Machine epsilon of the dtype the module computed in (its output's); float32's for an
    integer or float64 output, since the stages are compared at float32 precision at best."""
    dtype = capture.stages["output"].dtype
    return max(_EPS, float(torch.finfo(dtype).eps)) if dtype.is_floating_point else _EPS


def _stage_rtol(stage: str, capture: Capture, eps: float | None = None) -> float:
    """Relative error a correct computation of `stage` may carry in a dtype of epsilon `eps`
    (default: the capture's own; worst case, linear in K).

    Projections sum over d_in, scores over head_dim; each later stage inherits the error before it.
    """
    eps = capture_eps(capture) if eps is None else eps
    d_in = capture.stages["inputs"].shape[-1]
    keys = capture.stages.get("keys")
    d_k = keys.shape[-1] if keys is not None else d_in
    projection = 4 * eps * (d_in + 1)
    scores = 2 * projection + 4 * eps * (d_k + 1)
    return {"inputs": eps, "queries": projection, "keys": projection, "values": projection,
            "scores": scores, "scaled_scores": scores + 4 * eps}.get(stage, scores)


def stage_tolerance(stage: str, capture: Capture, eps: float | None = None, peaks: Peaks | None = None) -> float:
    """Absolute tolerance for comparing `stage` of `capture` with another computation of it, in a
    dtype of epsilon `eps` (default: the capture's own); `peaks`: the capture's, when measured.

    A softmax turns an absolute error e in its input into a relative error of about 2e in its
    output, so the weights, context and output tolerances grow with the scaled scores' magnitude:
    when float32 cannot resolve the weights, the comparison says so instead of guessing.
    """
    stages = capture.stages

    def peak(s: str) -> float:
        return peaks.peak[s] if peaks else max_abs(stages[s])

    def finite(s: str) -> float:
        return peaks.finite[s] if peaks else finite_max_abs(stages[s])

    atol = 1e-6
    eps = capture_eps(capture) if eps is None else eps
    if stage not in ("weights", "weights_applied", "context", "output"):
        return _stage_rtol(stage, capture, eps) * finite(stage) + atol
    logits = next((s for s in ("scaled_scores", "scores") if s in stages), None)
    logit_err = _stage_rtol("scaled_scores", capture, eps) * finite(logits) if logits is not None else 0.0
    weight_err = min(1.0, 2 * logit_err + 8 * eps * math.sqrt(stages["inputs"].shape[-2]))
    if stage in ("weights", "weights_applied"):
        return weight_err + atol
    values = stages.get("values")
    context_rtol = 2 * weight_err + _stage_rtol("values", capture, eps)
    if stage == "context" or capture.output_is_context:
        return context_rtol * peak("values" if values is not None else stage) + atol
    width = stages["output"].shape[-1]  # an output projection sums over the merged heads
    merged = math.prod(stages["context"].shape[1::2]) if "context" in stages else width
    return (context_rtol + 4 * eps * (merged + 1)) * peak("output") * math.sqrt(merged) + atol


def stage_differs(stage: str, variant: Capture, reference: Capture, other: torch.Tensor | None = None,
                  diff: float | None = None, peaks: Peaks | None = None) -> bool:
    """Whether `other` (default: the variant's stage) differs from the reference's stage; `diff`:
    max_abs_diff of the variant's stage, when already known (nan is computed again); `peaks`: the
    reference's, when measured."""
    mine = variant.stages[stage] if other is None else other
    ref = reference.stages[stage]
    if mine.shape != ref.shape:
        return True
    measured = diff if other is None and diff is not None and not math.isnan(diff) else max_abs_diff(mine, ref)
    return not measured <= stage_tolerance(stage, reference, max(capture_eps(variant), capture_eps(reference)), peaks)


def first_divergent_stage(variant: Capture, reference: Capture, diagnostics: dict[str, float] | None = None,
                          peaks: Peaks | None = None) -> str | None:
    """The first stage, in pipeline order, whose values differ from the reference's.

    A shape mismatch counts as divergent; a stage missing from either capture, or not observable in
    either (attnlab.capture.placement), is skipped. Captures
    as `attnlab.diagnosis.analysis` passes them (every mask at -inf). `diagnostics`
    (compute_diagnostics' flat values) saves a pass over each stage: its divergence is already there.
    """
    for stage in STAGES:
        observed = stage not in variant.unobservable and stage not in reference.unobservable
        if stage in variant.stages and stage in reference.stages and observed and stage_differs(
                stage, variant, reference, diff=(diagnostics or {}).get(f"divergence_{stage}"), peaks=peaks):
            return stage
    return None


@releasing
def _weights_diagnostics(weights: torch.Tensor | None, lengths: tuple[int, ...] | None = None
                         ) -> tuple[dict[str, float], dict[str, list[float]]]:
    """Row and column sums, entropy, row max and first-token mass of (batch, heads, query, key) weights;
    `lengths`: a padded batch's, each item's rows and keys up to its length (its pads never counted).

    Per (batch, head) block in float32 (torch's cascaded sums keep a block's sum to a few
    epsilon), accumulated over blocks in float64: a float64 copy or float64 reduction of each
    block cost more than all the statistics together."""
    names = ["weights_row_sum_max_err", "weights_col_sum_max_err", "weights_min", "weights_max",
             "weights_entropy_mean", "weights_entropy_norm_mean", "weights_row_max_mean", "weights_first_token_mass"]
    if weights is None or weights.dim() != 4 or weights.numel() == 0:
        return dict.fromkeys(names, NAN), {}
    batch, heads, n_query, n_keys = weights.shape
    padded, rows_in = lengths is not None, [min(n, n_query) for n in lengths or (n_query,) * batch]
    f64, wide = torch.float64, torch.promote_types(weights.dtype, torch.float32)  # bfloat16's log is too coarse
    row_err = col_err = 0.0
    entropy = torch.zeros(batch, heads, dtype=f64)
    row_max = torch.zeros(batch, heads, dtype=f64)
    first = torch.zeros(batch, heads, dtype=f64)
    extremes: list[torch.Tensor] = []  # (min, max) of each block; torch's min and max keep a NaN
    room = block_scratch(weights, wide)
    for b, h in itertools.product(range(batch), range(heads)):
        keys = min(rows_in[b], n_keys) if padded else n_keys  # a pad is a key no real row sees
        cols = torch.zeros(keys, dtype=f64)
        for rows in row_blocks(rows_in[b]):
            block = weights[b, h, rows, :keys].to(wide)  # (rows, key)
            row_err = max(row_err, float((block.sum(dim=-1) - 1).abs().max()))
            cols += block.sum(dim=0)
            extremes.append(torch.stack(torch.aminmax(block)))
            entropy[b, h] -= float(plogp(block, float(extremes[-1][0]), fitted(room, block)).sum())
            row_max[b, h] += float(block.amax(dim=-1).sum())
            first[b, h] += float(block[:, 0].sum())
        col_err = max(col_err, float((cols - 1).abs().max()))
    rows_of = torch.tensor(rows_in, dtype=f64)[:, None]  # (batch, 1)
    per_head = {"weights_entropy_mean": (entropy / rows_of).mean(dim=0),
                "weights_row_max_mean": (row_max / rows_of).mean(dim=0),
                "weights_first_token_mass": (first / rows_of).mean(dim=0)}
    mean_entropy = float(per_head["weights_entropy_mean"].mean())
    extreme = torch.stack(extremes)
    flat = {
        "weights_row_sum_max_err": row_err,
        "weights_col_sum_max_err": col_err,
        "weights_min": float(extreme[:, 0].min()),
        "weights_max": float(extreme[:, 1].max()),
        "weights_entropy_mean": mean_entropy,
        "weights_entropy_norm_mean": (mean_entropy / math.log(n_keys) if n_keys > 1 else NAN) if not padded
        else float((entropy / rows_of / rows_of.log()).mean()) if min(rows_in) > 1 else NAN,
        "weights_row_max_mean": float(per_head["weights_row_max_mean"].mean()),
        "weights_first_token_mass": float(per_head["weights_first_token_mass"].mean()),
    }
    return flat, {name: [float(v) for v in values] for name, values in per_head.items()}


def plogp(block: torch.Tensor, lowest: float, room: torch.Tensor) -> torch.Tensor:
    """block x log(block), 0 where block is 0 (xlogy's values), in `room` where no entry is below 0
    (`lowest`: the block's min; NaN keeps xlogy): a weight of 0 is raised to the dtype's smallest
    normal first, whose log times 0 is 0, and torch's vectorised log runs ~10x faster than xlogy's
    scalar one (the same values to float32's last bits; a weight below the smallest normal, whose
    own term is under 1e-36, is taken as that normal)."""
    if not lowest >= 0:
        terms: torch.Tensor = torch.special.xlogy(block, block)
        return terms
    return torch.clamp(block, min=torch.finfo(block.dtype).tiny, out=room).log_().mul_(block)


@releasing
def scale_observed(scores: torch.Tensor | None, scaled: torch.Tensor | None) -> float:
    """Least-squares factor c in scaled_scores ~ c * scores (in blocks; float64 across blocks),
    over the entries finite in both: a mask's -inf says nothing about the scaling."""
    if scores is None or scaled is None or scores.shape != scaled.shape:
        return NAN
    known = fitted_scale(scores, scaled)
    if known is not None:
        return known
    dot = norm = 0.0
    wide = torch.promote_types(scores.dtype, torch.float32)
    rooms, zero = [block_scratch(scores, wide) for _ in range(2)], torch.zeros((), dtype=wide)
    for i in blocks(scores):
        s, t = scores[i].to(wide).reshape(-1), scaled[i].to(wide).reshape(-1)
        finite_t, kept = (fitted(room, t) for room in rooms)
        torch.nan_to_num(t, nan=0.0, posinf=0.0, neginf=0.0, out=finite_t)  # the mask is in t
        # s + t * 0 is s where both are finite and NaN or inf elsewhere: then 0, so finite_t's others add nothing
        torch.addcmul(s, t, zero, out=kept).nan_to_num_(nan=0.0, posinf=0.0, neginf=0.0)
        dot += float(torch.dot(kept, finite_t))  # BLAS: one pass, no product temporary
        norm += float(torch.dot(kept, kept))
    return dot / norm if norm > 0 else NAN


def _softmax_input(capture: Capture) -> tuple[torch.Tensor | None, float]:
    """The softmax input and the factor it still needs: without scaled scores, the scores scaled
    by 1/sqrt(d_k) stand in for it (a hand-written softmax must match that)."""
    s = capture.stages
    if "scaled_scores" in s:
        return s["scaled_scores"], 1.0
    if "scores" in s and "keys" in s:
        return s["scores"], s["keys"].shape[-1] ** -0.5
    return None, 1.0


@releasing
def softmax_checks(capture: Capture) -> tuple[float, float]:
    """max |weights - softmax(softmax input, over the keys)|, and the source's check for every
    token: each row of the context against that token's own computation (the softmax of the
    variant's own softmax input row, mask included, times its values). One softmax per block
    serves both."""
    s = capture.stages
    weights = s.get("weights")
    logits, scale = _softmax_input(capture)
    if weights is None or logits is None or logits.shape != weights.shape:
        return NAN, NAN
    values, context = s.get("values"), s.get("context")
    per_token = (values is not None and context is not None and context.shape[:3] == logits.shape[:3]
                 and values.shape[-2] == logits.shape[-1] and values.shape[-1] == context.shape[-1])
    heads, kv_heads = weights.shape[1], values.shape[1] if values is not None else weights.shape[1]
    softmax_gaps, token_gaps = [], []
    scratch = difference_scratch(weights, logits)  # softmax keeps the logits' dtype
    for i in blocks(weights):
        p = torch.softmax(logits[i] * scale if scale != 1.0 else logits[i], dim=-1)
        softmax_gaps.append(max_abs_diff(p, weights[i], scratch))
        if per_token and values is not None and context is not None and isinstance(i[1], int):  # (batch, head, rows)
            kv = kv_head_of(i[1], heads, kv_heads, capture.kv_order)  # the values head this query head reads
            token_gaps.append(max_abs_diff(p @ values[i[0], kv], context[i]))
    return max(softmax_gaps, default=NAN), max(token_gaps, default=NAN)


def expected_shapes(reference: Capture) -> dict[str, tuple[int, ...]]:
    """Shapes predicted for every stage: the reference's, in its own rank."""
    return dict(reference.native_shapes)


Grid = list[list[float]]  # max |variant - reference| per (batch item, head); one column where a stage has no heads


@releasing
def _grid(mine: torch.Tensor | None, ref: torch.Tensor | None) -> Grid | None:
    if mine is None or ref is None or mine.shape != ref.shape or mine.dim() < 3:
        return None
    heads = mine.shape[1] if mine.dim() == 4 else 0
    if mine is ref:  # the reference's own diagnostics
        return [[0.0] * max(heads, 1) for _ in range(mine.shape[0])]
    scratch = difference_scratch(mine, ref)  # one for every (batch item, head)
    if not heads:
        return [[max_abs_diff(mine[b], ref[b], scratch)] for b in range(mine.shape[0])]
    return [[max_abs_diff(mine[b, h], ref[b, h], scratch) for h in range(heads)] for b in range(mine.shape[0])]


def divergence_grids(variant: Capture, reference: Capture, stages: tuple[str, ...] = STAGES) -> dict[str, Grid]:
    """Every stage's max |variant - reference| per (batch item, head), for the stages both captured
    in one shape: the divergences, the per-head table and where each finding holds all read these."""
    grids = {stage: _grid(variant.stages.get(stage), reference.stages.get(stage)) for stage in stages}
    return {stage: grid for stage, grid in grids.items() if grid is not None}


def _not_masked(capture: Capture, stage: str, measured: Peaks, found: dict[str, NegInf]) -> float:
    """NaN/inf entries of a stage that no mask placed (`found`: the capture's neg_infs)."""
    neg_inf = found.get(stage)
    if neg_inf is None:
        return _non_finite(capture.stages[stage], measured.peak[stage])
    count = neg_inf.count if neg_inf.clean else _non_finite(capture.stages[stage], measured.peak[stage])
    return count - neg_inf.placed


def _worst(values: list[float]) -> float:
    return max(values, default=0.0)


def own_statistics(capture: Capture) -> tuple[dict[str, float], dict[str, list[float]]]:
    """What a capture's own OWN_STAGES say, the reference left out: the weights' statistics (flat,
    per head), the softmax checks and the scale it applied."""
    flat, heads = _weights_diagnostics(capture.stages.get("weights"), capture.lengths)
    flat["weights_softmax_max_err"], flat["batched_single_max_abs_diff"] = softmax_checks(capture)
    # a term the module adds to its scores itself (relative-position logits) is no scale: its factor is read from its ops
    flat["scale_observed"] = (capture.score_terms if capture.score_terms is not None
                              else scale_observed(capture.stages.get("scores"), capture.stages.get("scaled_scores")))
    return flat, heads


def compute_diagnostics(variant: Capture, reference: Capture, grids: dict[str, Grid] | None = None,
                        measured: tuple[Peaks, Peaks] | None = None, found: dict[str, NegInf] | None = None,
                        own: tuple[dict[str, float], dict[str, list[float]]] | None = None,
                        ) -> tuple[dict[str, float], dict[str, list[float]]]:
    """Flat {name: float} for the record and sweep tables (nan where not computable), and the
    per-head values {name: [one per head]}. Captures as `attnlab.diagnosis.analysis` passes them
    (every mask at -inf, so `non_finite_<stage>` counts only what no mask placed); `grids`:
    their divergence_grids, `measured`: the variant's and the reference's peaks, `found`: the
    variant's neg_infs, `own`: its own_statistics, when already computed."""
    grids = divergence_grids(variant, reference) if grids is None else grids
    v_peaks, ref_peaks = measured or (peaks(variant), peaks(reference))
    found = neg_infs(variant, v_peaks) if found is None else found
    out: dict[str, float] = {}
    per_head: dict[str, list[float]] = {}
    shapes = expected_shapes(reference)
    for stage in ("weights", "context"):
        grid = grids.get(stage)
        if grid is not None and variant.stages[stage].dim() == 4 and grid[0]:
            per_head[f"divergence_{stage}"] = [_worst([row[h] for row in grid]) for h in range(len(grid[0]))]
    for stage in STAGES:
        mine, ref = variant.stages.get(stage), reference.stages.get(stage)
        grid = grids.get(stage)
        diff = _worst([_worst(row) for row in grid]) if grid is not None else NAN
        scale = ref_peaks.peak[stage] if ref is not None else NAN
        out[f"divergence_{stage}"] = diff
        out[f"relative_divergence_{stage}"] = diff / scale if scale > 0 else NAN
        out[f"non_finite_{stage}"] = _not_masked(variant, stage, v_peaks, found) if mine is not None else NAN
        native = variant.native_shapes.get(stage)
        out[f"shape_ok_{stage}"] = float(native == shapes[stage]) if native is not None and stage in shapes else NAN
    flat, heads = own_statistics(variant) if own is None else own
    out.update(flat)
    per_head.update(heads)
    keys = variant.stages.get("keys")
    usual = keys.shape[-1] ** -0.5 if keys is not None else NAN
    # the scale the variant's library class declares (Gemma's, Pix2Struct's 1.0), else the reference's, else the
    # book's: a copy that went back to 1/sqrt(head_dim) where its class declares another is still a scaling error
    declared = variant.declared_scale or reference.declared_scale
    out["scale_expected"] = declared[0] if declared else usual
    out["softmax_dim"] = float(variant.softmax_dim) if variant.softmax_dim is not None else NAN
    if len(heads.get("weights_entropy_mean", [])) > 1:  # per-head table columns, where users compare heads
        for name in HEAD_COLUMNS:
            out.update({f"{name}_h{h}": value for h, value in enumerate(heads[name])})
    return out, per_head
