"""One Hydra job: validate, run every seed, write each record first, then hand it to the sinks.

The record is written atomically before any other sink runs, so a sink that fails (or a Ctrl-C)
never loses a finished result; sweep tables are rebuilt from these files.
"""

from __future__ import annotations

import sys
from pathlib import Path

from omegaconf import DictConfig

from attnlab.config import validate
from attnlab.inputs import make_inputs
from attnlab.pipeline import compute_record
from attnlab.predictions import validate_expectations
from attnlab.record import RECORD_FILE, Record, write_record
from attnlab.registry import get_variant
from attnlab.sinks.table import module_table, to_markdown, write_table_csv
from attnlab.sinks.terminal import print_record

TABLE_FILE = "comparison.csv"


def check(cfg: DictConfig) -> None:
    """Everything that can be wrong with the request, before any work."""
    validate(cfg)
    validate_expectations(cfg.expect)
    get_variant(cfg.variant.name)
    get_variant("reference")


def compute_records(cfg: DictConfig) -> list[Record]:
    check(cfg)
    return [compute_record(cfg, seed, make_inputs(cfg.inputs, seed)) for seed in range(cfg.seed, cfg.seed + cfg.n_seeds)]


def record_dir(job_dir: Path, record: Record, n_seeds: int) -> Path:
    return job_dir if n_seeds == 1 else job_dir / f"seed-{record.seed}"


def write_outputs(cfg: DictConfig, records: list[Record], job_dir: Path) -> None:
    for record in records:
        write_record(record, record_dir(job_dir, record, len(records)))
    tables = [module_table(record) for record in records]
    if cfg.log.table:
        for record, table in zip(records, tables):
            write_table_csv(table, record_dir(job_dir, record, len(records)) / TABLE_FILE)
    if cfg.log.terminal:
        for record in records:
            print_record(record)
            print(f"record: {record.path}", file=sys.stdout)
    if cfg.log.tensorboard:
        from attnlab.sinks.tensorboard import write_tensorboard

        for record, table in zip(records, tables):
            if record.ok:
                write_tensorboard(
                    record, record_dir(job_dir, record, len(records)), table_markdown=to_markdown(table.T),
                    images=cfg.log.images, histograms=cfg.log.histograms,
                )


def run_job(cfg: DictConfig, job_dir: Path) -> list[Record]:
    records = compute_records(cfg)
    write_outputs(cfg, records, job_dir)
    return records


__all__ = ["RECORD_FILE", "check", "compute_records", "run_job", "write_outputs"]
