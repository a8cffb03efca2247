"""Stages attnlab cannot place in the canonical view (attnlab.capture.placement), named so: an
honest "not observable" instead of a comparison that would read a layout as a mistake."""

from __future__ import annotations

from attnlab.diagnosis.context import Context, Found, finding
from attnlab.record import Finding


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
    return [finding("not_observable", next(iter(side.unobservable)), f"not observable: {whys}. attnlab cannot place "
                    f"these stages of {who} where the canonical view says, so they are not compared with the other "
                    f"side; what the module's own numbers show (its scale, its softmax's axis, where its queries come "
                    f"from) and the later stages still are.")]
