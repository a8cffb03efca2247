"""One Hydra job: validate, run every seed, write each record first, then hand it to the sinks.

The record is written atomically before any other sink runs, so a sink that fails (or a Ctrl-C)
never loses a finished result; sweep tables are rebuilt from these files.

One seed (the default) writes into the job folder: record.json, comparison.csv (the reference
and the variant side by side), the TensorBoard run, and the full terminal summary.

`n_seeds=N` runs seeds seed .. seed+N-1 in the same process, the config read once, and writes:
- `seed-<s>/record.json` per seed (each equal to that seed's single run; `attnlab compare`
  and the sweep tables find them under the job folder);
- one `comparison.csv` in the job folder, one row per seed (the variant's row, as in a sweep);
- one TensorBoard run in the job folder: every seed's scalars at step=seed, images, histograms,
  texts and the HParams session for the first seed;
- on the terminal, a compact table with a line per seed instead of N full summaries.
"""

from __future__ import annotations

import sys
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from attnlab.config import validate
from attnlab.inputs import make_inputs
from attnlab.pipeline import JobSpec, compute_record
from attnlab.predictions import validate_expectations
from attnlab.progress import Progress
from attnlab.record import Record, write_record
from attnlab.registry import get_variant
from attnlab.sinks.table import module_rows, record_row, rows_markdown, write_rows_csv
from attnlab.sinks.terminal import print_record, print_seeds, reader_may_leave

TABLE_FILE = "comparison.csv"
SEED_DIR = "seed-{seed}"


def check(cfg: DictConfig) -> None:
    """Everything that can be wrong with the request, before any work."""
    validate(cfg)
    validate_expectations(OmegaConf.to_container(cfg.expect, resolve=True))
    get_variant(cfg.variant.name)
    get_variant("reference")


def seeds(cfg: DictConfig) -> range:
    return range(cfg.seed, cfg.seed + cfg.n_seeds)


def compute_records(cfg: DictConfig, progress: Progress | None = None) -> list[Record]:
    check(cfg)
    spec = JobSpec.from_cfg(cfg)
    progress = progress or Progress(cfg.n_seeds, enabled=False)
    records = []
    for seed in seeds(cfg):
        progress.phase(f"seed {seed}: inputs")
        inputs = make_inputs(cfg.inputs, seed)
        records.append(compute_record(cfg, seed, inputs, spec=spec,
                                      phase=lambda part, s=seed: progress.phase(f"seed {s}: {part}")))
        progress.advance()
    return records


def record_dir(job_dir: Path, record: Record, n_seeds: int) -> Path:
    return job_dir if n_seeds == 1 else job_dir / SEED_DIR.format(seed=record.seed)


def write_outputs(cfg: DictConfig, records: list[Record], job_dir: Path, progress: Progress | None = None) -> None:
    progress = progress or Progress(len(records), enabled=False)
    progress.phase("records")
    for record in records:
        write_record(record, record_dir(job_dir, record, len(records)))
    single = len(records) == 1
    rows = module_rows(records[0]) if single else [record_row(record) for record in records]
    if cfg.log.table:
        progress.phase("table")
        write_rows_csv(rows, job_dir / TABLE_FILE)
    if cfg.log.terminal:
        progress.clear()
        with reader_may_leave():
            if single:
                print_record(records[0])
                print(f"record: {records[0].path}", flush=True)
            else:
                print_seeds(records, job_dir / TABLE_FILE if cfg.log.table else None)
                sys.stdout.flush()
    if cfg.log.tensorboard:
        progress.phase("tensorboard")
        from attnlab.sinks.tensorboard import write_tensorboard

        write_tensorboard(records, job_dir, table_markdown=rows_markdown(rows, transpose=single),
                          images=cfg.log.images, histograms=cfg.log.histograms)


def run_job(cfg: DictConfig, job_dir: Path) -> list[Record]:
    with Progress(cfg.n_seeds, label="seeds", enabled=bool(cfg.log.progress)) as progress:
        records = compute_records(cfg, progress)
        write_outputs(cfg, records, job_dir, progress)
    return records
