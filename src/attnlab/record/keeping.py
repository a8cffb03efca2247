"""How much of a record's stage values a job keeps once the record is written: each a new record."""

from __future__ import annotations

import tempfile
from dataclasses import replace
from pathlib import Path

from attnlab.capture.spill import spill_arrays
from attnlab.record.model import Record


def without_stages(record: Record) -> Record:
    """The reductions without the stage values (their shapes stay): a streamed seed."""
    return replace(record, stages=dict.fromkeys(record.stages),
                   reference_stages=dict.fromkeys(record.reference_stages), scratch=None)


def keeping_stages(record: Record, names: tuple[str, ...]) -> Record:
    """Only these stages' values (both modules'), on disk: a layer of a model after the first,
    whose head grid the sinks still draw."""
    return spilled(replace(record, stages={k: v if k in names else None for k, v in record.stages.items()},
                           reference_stages={k: v if k in names else None
                                             for k, v in record.reference_stages.items()}))


def spilled(record: Record) -> Record:
    """The stage values on disk, memory-mapped, instead of in memory (a streamed seed whose
    images the sinks still draw)."""
    scratch = record.scratch if record.scratch is not None else tempfile.TemporaryDirectory(prefix="attnlab-spill-")
    stages, reference_stages = dict(record.stages), dict(record.reference_stages)
    spill_arrays(stages, Path(scratch.name), prefix="variant-")
    spill_arrays(reference_stages, Path(scratch.name), prefix="reference-")
    return replace(record, stages=stages, reference_stages=reference_stages, scratch=scratch)
