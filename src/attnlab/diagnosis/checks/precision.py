"""A module run in a coarser dtype than float32 (bfloat16, float16): its rounding, not a bug."""

from __future__ import annotations

import math

import torch

from attnlab.capture.stages import STAGES
from attnlab.diagnosis.context import Context, Found
from attnlab.diagnosis.diagnostics import capture_eps
from attnlab.diagnosis.finding_code import FIRST_WHERE_IT_SHOWS, Code, finds
from attnlab.record import Finding

PRECISION = Code(
    "precision", FIRST_WHERE_IT_SHOWS, "info",
    "bfloat16/float16 rounding beyond float32's bound but within the coarser dtype's: not a bug",
    "{dtype} rounding: the values differ from the reference from the {first} on ({last} by up to {diff:.3g}), more "
    "than float32 rounding allows but within {dtype}'s bound ({bound:.3g} for the {last}: eps {eps:.3g} x the values' "
    "scale x the length of each sum); a precision effect, not a bug.",
    "bfloat16/float16 rounding: more than float32's bound, within the coarser dtype's (see Cost, precision and "
    "device)",
    ("tests/compute/test_precision.py::test_a_correct_variant_in_low_precision_gets_precision_only",), "book")


@finds(PRECISION)

def precision(ctx: Context, found: Found) -> list[Finding]:
    """Values that differ from the reference by more than float32 rounding allows but within
    the bound of the coarser dtype one module ran in (its epsilon x the values' scale x the
    length of each sum): an info note, never a bug; any error found first wins."""
    float32_eps = float(torch.finfo(torch.float32).eps)
    coarse = max((ctx.v, ctx.ref), key=capture_eps)
    eps = capture_eps(coarse)
    if eps <= float32_eps or not ctx.shared or found.errors():
        return []
    compared = [s for s in STAGES if ctx.present(s) and s in ctx.ref.stages
                and ctx.v.stages[s].shape == ctx.ref.stages[s].shape]
    beyond = [s for s in compared if ctx.d.get(f"divergence_{s}", math.nan) > ctx.tolerance(s, eps=float32_eps)]
    if not beyond or any(ctx.differs(s) for s in compared):
        return []
    dtype = str(coarse.stages["output"].dtype).removeprefix("torch.")
    last = compared[-1]
    return [PRECISION(beyond[0], dtype=dtype, first=beyond[0], last=last, diff=ctx.d[f"divergence_{last}"],
                      bound=ctx.tolerance(last, eps=eps), eps=eps)]
