"""How much of a record's stage values a job keeps once the record is written: each a new record."""

from __future__ import annotations

import tempfile
from dataclasses import replace
from pathlib import Path

import numpy as np

from attnlab.capture.spill import Memory, distinct_bytes, spill_arrays
from attnlab.record.model import Record, Side


def without_stages(record: Record) -> Record:
    """The reductions without the stage values (their shapes stay): a streamed seed."""
    return replace(record, variant=replace(record.variant, stages=dict.fromkeys(record.variant.stages)),
                   reference=replace(record.reference, stages=dict.fromkeys(record.reference.stages)), scratch=None)


def keeping_stages(record: Record, names: tuple[str, ...]) -> Record:
    """Only these stages' values (both modules'), on disk: a layer of a model after the first,
    whose head grid the sinks still draw."""
    return spilled(replace(record, variant=_keeping(record.variant, names),
                           reference=_keeping(record.reference, names)))


def spilled(record: Record) -> Record:
    """The stage values on disk, memory-mapped, instead of in memory (a streamed seed whose
    images the sinks still draw)."""
    scratch = record.scratch if record.scratch is not None else tempfile.TemporaryDirectory(prefix="attnlab-spill-")
    stages, reference_stages = dict(record.variant.stages), dict(record.reference.stages)
    written: dict[Memory, np.ndarray] = {}  # a stage both sides hold (the model's own, unedited) written once
    spill_arrays(stages, Path(scratch.name), prefix="variant-", written=written)
    spill_arrays(reference_stages, Path(scratch.name), prefix="reference-", written=written)
    return replace(record, variant=replace(record.variant, stages=stages),
                   reference=replace(record.reference, stages=reference_stages), scratch=scratch)


def stage_bytes(record: Record) -> int:
    """The bytes of a record's stage values in memory, a stage both sides share counted once."""
    return distinct_bytes(*(v for side in (record.variant, record.reference) for v in side.stages.values()
                            if not isinstance(v, np.memmap)))


def _keeping(side: Side, names: tuple[str, ...]) -> Side:
    return replace(side, stages={k: v if k in names else None for k, v in side.stages.items()})
