"""The diagnosis of one run, from its two captures to what the record holds: the masks made -inf
once, each stage's divergence per (batch item, head) once, and everything else read from those."""

from __future__ import annotations

from dataclasses import dataclass, replace

from attnlab.capture.recorder import Capture
from attnlab.diagnosis.batch_mixing import BatchMixing
from attnlab.diagnosis.check_runner import diagnose_context
from attnlab.diagnosis.context import build_context
from attnlab.diagnosis.diagnostics import (
    OWN_STAGES,
    Grid,
    compute_diagnostics,
    divergence_grids,
    first_divergent_stage,
    own_statistics,
)
from attnlab.diagnosis.masking import neg_infs, with_masks_as_neg_inf
from attnlab.diagnosis.stage_blocks import one_thread, peaks
from attnlab.record import Finding

SOFTMAX_SIDE = ("scores", "scaled_scores", "weights")  # what the masks and the -inf counts read


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
    """Diagnostics, the first divergent stage and the findings of a variant against its reference.

    Where the variant's stages hold the reference's values entry for entry (the grids say so), the
    reference's own peaks, -inf entries and statistics are the variant's: not measured again."""
    variant, reference, grids = _masked(variant, reference)
    v_peaks, same = peaks(variant), _same_values(variant, reference, grids)
    ref_peaks = peaks(reference, known=v_peaks, same=same)
    v_found = neg_infs(variant, v_peaks)
    ref_found = v_found if _same_on(SOFTMAX_SIDE, variant, reference, same) else neg_infs(reference, ref_peaks)
    measured, found = (v_peaks, ref_peaks), (v_found, ref_found)
    own = own_statistics(variant)
    diagnostics, head_diagnostics = compute_diagnostics(variant, reference, grids, measured, v_found, own)
    reference_diagnostics, _ = compute_diagnostics(reference, reference, measured=(ref_peaks, ref_peaks),
                                                   found=ref_found,
                                                   own=own if _same_on(OWN_STAGES, variant, reference, same) else None)
    first = first_divergent_stage(variant, reference, diagnostics, ref_peaks)
    ctx = build_context(variant, reference, diagnostics, weights_shared=weights_shared, train=train,
                        mixing=batch_mixing, grids=grids, measured=measured, found=found)
    return Analysis(diagnostics, head_diagnostics, reference_diagnostics, first, diagnose_context(ctx))


def _masked(variant: Capture, reference: Capture) -> tuple[Capture, Capture, dict[str, Grid]]:
    """Both captures with their masks at -inf, and their divergence grids. The grids come first:
    masking rewrites only the scaled scores, and a reference whose SOFTMAX_SIDE holds the
    variant's values entry for entry is masked as the variant is (with the variant's tensor)."""
    grids = divergence_grids(variant, reference)
    mine = with_masks_as_neg_inf(variant)
    if _same_on(SOFTMAX_SIDE, variant, reference, _same_values(variant, reference, grids)):
        theirs = reference if mine is variant else replace(
            reference, stages={**reference.stages, "scaled_scores": mine.stages["scaled_scores"]})
        return mine, theirs, grids
    theirs = with_masks_as_neg_inf(reference)
    if mine is not variant or theirs is not reference:  # a finite fill against -inf is no divergence
        grids = {**grids, **divergence_grids(mine, theirs, ("scaled_scores",))}
    return mine, theirs, grids


def _same_values(variant: Capture, reference: Capture, grids: dict[str, Grid]) -> frozenset[str]:
    """The stages whose every entry equals the reference's (a divergence of 0 everywhere: a NaN
    or an inf against another value is none), in one dtype."""
    return frozenset(stage for stage, grid in grids.items()
                     if all(gap == 0.0 for row in grid for gap in row)
                     and variant.stages[stage].dtype == reference.stages[stage].dtype)


def _same_on(stages: tuple[str, ...], variant: Capture, reference: Capture, same: frozenset[str]) -> bool:
    """Whether both captures hold the same of `stages`, each with the same values."""
    return all((s in variant.stages) == (s in reference.stages) and (s in same or s not in variant.stages)
               for s in stages)
