"""Stages attnlab cannot place in the canonical view (attnlab.capture.placement), named so: an
honest "not observable" instead of a comparison that would read a layout as a mistake."""

from __future__ import annotations

from attnlab.diagnosis.context import Context, Found
from attnlab.diagnosis.finding_code import Code, finds
from attnlab.record import Finding

NOT_OBSERVABLE = Code(
    "not_observable", ("queries", "keys", "values", "scores", "scaled_scores", "weights", "weights_applied", "context"),
    "info",
    "stages computed in a layout attnlab cannot place (heads folded into the batch, windows, sub-heads): named, "
    "never compared with the reference",
    "not observable: {whys}. attnlab cannot place these stages of {who} where the canonical view says, so they are "
    "not compared with the other side; what the module's own numbers show (its scale, its softmax's axis, where its "
    "queries come from) and the later stages still are.",
    "the stages computed in a layout attnlab cannot place (windows, heads folded into the batch, sub-heads), each "
    "with the shape the module made it in or why; they are not compared with the reference, while what the "
    "module's own numbers show (its scale, its softmax's axis, where its queries come from) is still checked",
    ("tests/capture/test_follows_data.py::test_a_correct_copy_gives_no_error_finding",), "layouts", explains=False)


@finds(NOT_OBSERVABLE)

def not_observable(ctx: Context, found: Found) -> list[Finding]:
    """One note for the stages of the variant (else the reference) not where the canonical view says,
    grouped by why, each with the shape the module made it in."""
    if not (ctx.v.unobservable or ctx.ref.unobservable):
        return []
    side = ctx.v if ctx.v.unobservable else ctx.ref
    by_reason: dict[str, list[str]] = {}
    for stage, why in side.unobservable.items():
        by_reason.setdefault(why, []).append(f"{stage} {tuple(side.native_shapes.get(stage, ()))}")
    whys = "; ".join(f"{', '.join(stages)}: {why}" for why, stages in by_reason.items())
    who = "the variant" if side is ctx.v else "the reference"
    return [NOT_OBSERVABLE(next(iter(side.unobservable)), whys=whys, who=who)]
