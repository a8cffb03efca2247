"""A sweep job launched again whose records are already in its folder: their outputs written from
them, nothing recomputed, when they are this job's.

A job killed after its records but before its last output left ok records and no completion mark
(attnlab.record.completion): the resumed sweep launches it again, and the records stand, checked
against the job's config (a folder holding another job's record.json runs the job again, and says so).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from omegaconf import DictConfig

from attnlab.app.config_values import resolved
from attnlab.app.job_settings import wants_model
from attnlab.record import RECORD_FILE, Record, RecordError, read_record, without_stages


def records_on_disk(cfg: DictConfig, job_dir: Path) -> list[Record] | None:
    """The job's records in `job_dir` when every seed has an ok one of this config; else None."""
    paths = sorted(Path(job_dir).rglob(RECORD_FILE))
    if not paths or wants_model(cfg):  # a model's layers: their count is known only once it is loaded
        return None
    try:
        records = [read_record(path) for path in paths]
    except RecordError:
        return None
    config = json.loads(json.dumps(resolved(cfg)))  # as a record holds it: JSON's lists and names
    if any(record.config != config for record in records):
        say(f"{job_dir}: its record.json is not this job's (another config); running the job again")
        return None
    if len(records) != cfg.n_seeds or not all(record.ok for record in records):
        return None
    records.sort(key=lambda record: record.seed)
    return [records[0], *(without_stages(record) for record in records[1:])]  # the sinks draw from the first


def say(line: str) -> None:
    print(f"attnlab: {line}", file=sys.stderr, flush=True)


__all__ = ["records_on_disk"]
