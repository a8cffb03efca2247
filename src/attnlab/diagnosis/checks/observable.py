"""Stages attnlab cannot place in the canonical view (attnlab.capture.placement), named so: an
honest "not observable" instead of a comparison that would read a layout as a mistake."""

from __future__ import annotations

from attnlab.diagnosis.context import Context, Found, finding
from attnlab.record import Finding


def not_observable(ctx: Context, found: Found) -> list[Finding]:
    """One note for the variant's stages that are not where the reference's are, grouped by why."""
    missing = {**ctx.ref.unobservable, **ctx.v.unobservable}
    if not missing:
        return []
    by_reason: dict[str, list[str]] = {}
    for stage, why in missing.items():
        by_reason.setdefault(why, []).append(stage)
    whys = "; ".join(f"{', '.join(stages)}: {why}" for why, stages in by_reason.items())
    side = "the variant" if ctx.v.unobservable else "the reference"
    return [finding("not_observable", next(iter(missing)), f"not observable: {whys}. attnlab cannot place these "
                    f"stages of {side} where the canonical view says, so they are not compared with the other side; "
                    f"what the module's own numbers show (its scale, its softmax's axis) and the later stages still are.",
                    heads=[], batch=[])]
