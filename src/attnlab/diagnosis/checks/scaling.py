"""The softmax input's scale: scores / sqrt(d_k) (section 3.3.1), named in the source's words."""

from __future__ import annotations

import math

from attnlab.diagnosis.context import Context, Found
from attnlab.diagnosis.diagnostics import capture_eps, scale_observed
from attnlab.diagnosis.finding_code import Code, finds
from attnlab.diagnosis.message_format import fmt
from attnlab.record import Finding

SCALE_RTOL = 1e-3

SCALING = Code(
    "scaling", ("scaled_scores",), "error",
    "the softmax input is not scores / sqrt(d_k); names both factors",
    {"after": "the softmax input is the scores scaled by {observed}{used}, expected {expected} ({right}); check the "
              "division by keys.shape[-1] ** 0.5 before the softmax{hint}.",
     "before": "the softmax input is the scores (unscaled queries @ keys.T) scaled by {observed} in all, expected "
               "{expected} (1/sqrt(d_k)); {where} before the score product: scale by keys.shape[-1] ** -0.5 once, "
               "there or before the softmax."},
    "the softmax input is not `scores / sqrt(d_k)`: names the factor used and the right one (1/sqrt(head_dim) with "
    "several heads), and recognises 1/sqrt(d_out), 1/sqrt(d_in) and 1/d_k, also when the queries were scaled before "
    "the score product",
    ("unscaled", "scaled_by_dk", "prescaled_by_dk", "mha_scaled_by_d_out"), "book")


def _masked_scale(ctx: Context) -> float | None:
    """The effective scale over the entries the reference does not hide (a finite fill is no scaling)."""
    if ctx.ref_mask is None or not ctx.finite_fill or ctx.v.score_terms is not None:
        return None  # (a factor read from the module's ops needs no fit)
    scores, scaled = ctx.v.stages.get("scores"), ctx.v.stages.get("scaled_scores")
    if scores is None or scaled is None or scores.shape != scaled.shape:
        return None
    return scale_observed(scores, scaled.masked_fill(ctx.ref_mask, float("nan")))


@finds(SCALING)
def scaling(ctx: Context, found: Found) -> list[Finding]:
    observed, expected = ctx.d.get("scale_observed", math.nan), ctx.d.get("scale_expected", math.nan)
    masked = _masked_scale(ctx)
    observed = observed if masked is None else masked
    rtol = max(SCALE_RTOL, 2 * capture_eps(ctx.v))  # bfloat16 rounds the factor itself
    off = abs(observed - expected) > rtol * expected
    if not (math.isfinite(observed) and math.isfinite(expected) and off):
        return []
    if not ctx.v.prescale:
        used, right, hint = _scale_names(ctx, observed)
        return [SCALING("scaled_scores", "after", observed=observed, used=used, expected=expected, right=right,
                        hint=hint)]
    where = " and ".join(f"the {stage} were multiplied by {fmt(f)}" for stage, f in ctx.v.prescale.items())
    return [SCALING("scaled_scores", "before", observed=observed, expected=expected, where=where)]


def _scale_names(ctx: Context, observed: float) -> tuple[str, str, str]:
    """The factor used in the source's words (" = 1/sqrt(d_out)"), the right one, and a hint for
    the common slip of dividing by the whole width instead of one head's."""
    keys, queries = ctx.v.stages.get("keys"), ctx.v.stages.get("queries")
    head_dim = keys.shape[-1] if keys is not None else 0
    heads = queries.shape[1] if queries is not None else 1
    right = "1/sqrt(d_k)" if heads == 1 else f"1/sqrt(head_dim), head_dim = keys.shape[-1] = {head_dim}"
    if not head_dim:
        return "", right, ""
    d_in, d_out = ctx.v.stages["inputs"].shape[-1], heads * head_dim
    names = {"1 (no scaling)": 1.0, f"1/sqrt(d_in) with d_in = {d_in}": d_in ** -0.5,
             f"1/d_k = 1/{head_dim}": 1 / head_dim}
    if heads > 1:
        names[f"1/sqrt(d_out) with d_out = {d_out}"] = d_out ** -0.5
    used = [name for name, factor in names.items() if abs(observed - factor) <= SCALE_RTOL * factor]
    if not used:
        return "", right, ""
    hint = ""
    if heads > 1 and any(name.startswith(("1/sqrt(d_out)", "1/sqrt(d_in)")) for name in used):
        hint = (f": each head's keys have head_dim = d_out // num_heads = {head_dim} columns, so divide by "
                f"keys.shape[-1] ** 0.5 (head_dim), not by the whole width")
    return f" = {' = '.join(used)}", right, hint
