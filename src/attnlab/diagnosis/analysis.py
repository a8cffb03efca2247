"""The diagnosis of one run, from its two captures to what the record holds: the masks made -inf
once, each stage's divergence per (batch item, head) once, and everything else read from those."""

from __future__ import annotations

from dataclasses import dataclass

from attnlab.capture.recorder import Capture
from attnlab.diagnosis.batch_mixing import BatchMixing
from attnlab.diagnosis.context import build_context
from attnlab.diagnosis.diagnostics import compute_diagnostics, divergence_grids, first_divergent_stage
from attnlab.diagnosis.masking import neg_infs, with_masks_as_neg_inf
from attnlab.diagnosis.passes import one_thread, peaks
from attnlab.diagnosis.runner import diagnose_context
from attnlab.record import Finding


@dataclass(frozen=True)
class Analysis:
    diagnostics: dict[str, float]  # the variant against the reference
    head_diagnostics: dict[str, list[float]]
    reference_diagnostics: dict[str, float]  # the reference against itself
    first_divergent_stage: str | None
    findings: list[Finding]


@one_thread()
def analyse(variant: Capture, reference: Capture, *, weights_shared: bool, train: bool = False,
            batch_mixing: BatchMixing | None = None) -> Analysis:
    """Diagnostics, the first divergent stage and the findings of a variant against its reference."""
    variant, reference = with_masks_as_neg_inf(variant), with_masks_as_neg_inf(reference)
    grids, measured = divergence_grids(variant, reference), (peaks(variant), peaks(reference))
    found = neg_infs(variant, measured[0]), neg_infs(reference, measured[1])
    diagnostics, head_diagnostics = compute_diagnostics(variant, reference, grids, measured, found[0])
    reference_diagnostics, _ = compute_diagnostics(reference, reference, measured=(measured[1], measured[1]),
                                                   found=found[1])
    first = first_divergent_stage(variant, reference, diagnostics, measured[1])
    ctx = build_context(variant, reference, diagnostics, weights_shared=weights_shared, train=train,
                        mixing=batch_mixing, grids=grids, measured=measured, found=found)
    return Analysis(diagnostics, head_diagnostics, reference_diagnostics, first, diagnose_context(ctx))
