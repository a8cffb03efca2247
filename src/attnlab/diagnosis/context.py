"""What every check reads: the captured stages, their diagnostics and the facts derived once from
them (a read-only `Context`), and the findings the checks before it made (`Found`).

A check is a function `(Context, Found) -> list[Finding]`; the codes it may return are declared
beside it (attnlab.diagnosis.finding_code), and attnlab.diagnosis.codes lists the order the checks run in.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

import torch

from attnlab.capture.recorder import Capture
from attnlab.capture.stages import STAGES
from attnlab.diagnosis.batch_mixing import BatchMixing
from attnlab.diagnosis.diagnostics import Grid, divergence_grids, stage_differs, stage_tolerance
from attnlab.diagnosis.masking import NegInf, mask_count, neg_infs, reference_mask
from attnlab.diagnosis.stage_blocks import Peaks, peaks
from attnlab.record import Finding

MIN_TOKENS = 3  # the fewest tokens on which a deliberate change can be told from a bug


@dataclass
class Pair:
    """The variant and the reference, and which of their stages differ (each judged once)."""

    v: Capture
    ref: Capture
    diagnostics: Mapping[str, float]
    ref_peaks: Peaks
    _changed: dict[str, bool] = field(default_factory=dict)  # a memo of `changed`, filled on first ask

    def observed(self, stage: str) -> bool:
        """Whether both captures hold the stage where the canonical view says (attnlab.capture.placement)."""
        return stage not in self.v.unobservable and stage not in self.ref.unobservable

    def both(self, stage: str) -> tuple[torch.Tensor, torch.Tensor] | None:
        mine, ref = self.v.stages.get(stage), self.ref.stages.get(stage)
        if mine is None or ref is None or mine.shape != ref.shape or mine.numel() == 0 or not self.observed(stage):
            return None
        return mine, ref

    def changed(self, stage: str) -> bool:
        if not self.observed(stage):
            return False  # not where the reference's is: nothing to tell
        if stage not in self.ref.stages or stage not in self.v.stages:
            return False  # missing on one side (a kernel that never shows it): nothing to compare
        if stage not in self._changed:
            diff = self.diagnostics.get(f"divergence_{stage}")
            self._changed[stage] = (stage_differs(stage, self.v, self.ref, peaks=self.ref_peaks) if diff is None
                                    else not diff <= self.tolerance(stage))  # nan (shapes differ): changed
        return self._changed[stage]

    def tolerance(self, stage: str) -> float:
        return stage_tolerance(stage, self.ref, peaks=self.ref_peaks)

    @property
    def fits(self) -> bool:
        """Below MIN_TOKENS tokens any difference fits a bias, a cap, an angle: nothing is recognised."""
        return self.v.stages["inputs"].shape[-2] >= MIN_TOKENS


@dataclass(frozen=True)
class Context:
    """The captures, their diagnostics and the run's flags; derived facts computed once. The
    captures' softmax inputs hold every masked entry as -inf (attnlab.diagnosis.masking)."""

    v: Capture
    ref: Capture
    d: Mapping[str, float]  # compute_diagnostics' flat values of the variant against the reference
    shared: bool  # the variant ran with the reference's weights: value comparisons are meaningful
    train: bool  # the modules ran in training mode (dropout draws differ by chance)
    mixing: BatchMixing | None  # each batch item run alone against its slice
    unjudged_from: int  # stages from this index on differ for a known reason (dropout, batch mixing)
    mask_count: int  # the variant's masked entries of its softmax input (attnlab.diagnosis.masking)
    ref_mask: torch.Tensor | None  # the reference's (query, key) mask, where it has one
    mask_pattern: torch.Tensor | None  # where the variant's softmax input is -inf, when the same in every (batch, head)
    finite_fill: bool  # the variant holds finite values where the reference masks
    grids: Mapping[str, Grid]  # max |variant - reference| per (batch item, head) of each stage
    v_peaks: Peaks  # max |t| of each of the variant's stages
    ref_peaks: Peaks
    pair: Pair

    def present(self, *stages: str) -> bool:
        return all(s in self.v.stages for s in stages)

    def judged(self, stage: str) -> bool:
        """Whether a difference at this stage can be a finding of its own (not dropout's chance or
        batch mixing's consequence)."""
        return STAGES.index(stage) < self.unjudged_from

    def differs(self, stage: str, other: torch.Tensor | None = None) -> bool:
        if not self.pair.observed(stage):
            return False  # never proven different where attnlab cannot place the stage
        return stage_differs(stage, self.v, self.ref, other, diff=self.d.get(f"divergence_{stage}"),
                             peaks=self.ref_peaks)

    def tolerance(self, stage: str, capture: Capture | None = None, eps: float | None = None) -> float:
        """stage_tolerance of the reference's stage (or the variant's: `capture` is ctx.v)."""
        of_variant = capture is self.v
        return stage_tolerance(stage, self.v if of_variant else self.ref, eps,
                               self.v_peaks if of_variant else self.ref_peaks)

    def compare(self, stage: str, found: Found) -> bool:
        """Whether a comparison with the reference may judge this stage: only with shared weights and
        only until a finding explains the divergence (a wrong early stage makes every later one wrong)."""
        return (self.shared and not found.explains(stage) and self.judged(stage) and self.present(stage)
                and stage in self.ref.stages and self.pair.observed(stage))

    def differs_from(self, stage: str) -> bool:
        """Whether a stage from `stage` on that both captures hold where the canonical view says
        differs from the reference's (in values or in shape): an error at `stage` needs one."""
        later = STAGES[STAGES.index(stage):]
        return any(s in self.v.stages and s in self.ref.stages and self.pair.observed(s)
                   and (self.v.stages[s].shape != self.ref.stages[s].shape or self.pair.changed(s)) for s in later)


_PROJECTIONS = ("queries", "keys", "values")


@dataclass(frozen=True)
class Found:
    """The findings the checks before this one made, in order."""

    findings: tuple[Finding, ...] = ()
    # the earliest stage (its index in STAGES) of a finding that explains why stages from there on differ
    explained_from: int | None = None

    @property
    def explained(self) -> bool:
        return self.explained_from is not None

    def explains(self, stage: str) -> bool:
        """Whether an earlier finding explains why `stage` differs: a scale declared at the scaled scores
        explains nothing about the queries, which are still compared."""
        return self.explained_from is not None and self.explained_from <= STAGES.index(stage)

    def plus(self, f: Finding, explains: bool) -> Found:
        # an error is the root cause wherever it shows (undivided heads named at the output explain the queries);
        # a deliberate change explains its own stage on, the projections as one block (MLA's keys, its queries)
        at = None if not explains else 0 if f.severity == "error" else STAGES.index(
            "queries" if f.stage in _PROJECTIONS else f.stage)
        earliest = min((i for i in (self.explained_from, at) if i is not None), default=None)
        return Found(self.findings + (f,), earliest)

    def at(self, *stages: str) -> bool:
        return any(f.stage in stages for f in self.findings)

    def errors(self) -> bool:
        return any(f.severity == "error" for f in self.findings)


Check = Callable[[Context, Found], list[Finding]]


def _unjudged_from(v: Capture, ref: Capture, train: bool, mixing: BatchMixing | None) -> int:
    index = len(STAGES)
    if train and ("weights_applied" in v.stages or "weights_applied" in v.missing or "weights_applied" in ref.stages):
        index = STAGES.index("weights_applied")  # dropout draws differ: chance, not a bug
    if mixing is not None and mixing.stage is not None:
        index = min(index, STAGES.index(mixing.stage))  # comparisons from there on are batch mixing's consequences
    return index


def build_context(variant: Capture, reference: Capture, diagnostics: dict[str, float], *, weights_shared: bool,
                  train: bool = False, mixing: BatchMixing | None = None,
                  grids: Mapping[str, Grid] | None = None, measured: tuple[Peaks, Peaks] | None = None,
                  found: tuple[dict[str, NegInf], dict[str, NegInf]] | None = None) -> Context:
    """The context of captures whose masks are all -inf (attnlab.diagnosis.masking.with_masks_as_neg_inf);
    `grids`: their divergence_grids, `measured`: the variant's and the reference's peaks, `found`:
    their neg_infs, when already computed."""
    d = MappingProxyType(dict(diagnostics))
    grids = MappingProxyType(dict(divergence_grids(variant, reference) if grids is None else grids))
    v_peaks, ref_peaks = measured or (peaks(variant), peaks(reference))
    v_found, ref_found = found or (neg_infs(variant, v_peaks), neg_infs(reference, ref_peaks))
    ref_mask = reference_mask(variant, reference, ref_found)
    hidden = v_found.get("scaled_scores", NegInf())
    return Context(variant, reference, d, weights_shared, train, mixing, _unjudged_from(variant, reference, train, mixing),
                   mask_count(variant, v_peaks, v_found), ref_mask, hidden.pattern,
                   ref_mask is not None and hidden.count == 0, grids, v_peaks, ref_peaks,
                   Pair(variant, reference, d, ref_peaks))
