"""One Hydra job: validate, run every seed, write each record first, then hand it to the sinks.

The record is written atomically before any other sink runs, so a sink that fails (or a Ctrl-C)
never loses a finished result; sweep tables are rebuilt from these files.

One seed (the default) writes into the job folder: record.json, comparison.csv (the reference
and the variant side by side), the TensorBoard run, and the full terminal summary.

`n_seeds=N` runs seeds seed .. seed+N-1 in the same process, the config read once, and writes:
- `seed-<s>/record.json` per seed (each equal to that seed's single run; `attnlab compare`
  and the sweep tables find them under the job folder);
- one `comparison.csv` in the job folder, one row per seed (the variant's row, as in a sweep);
- one TensorBoard run in the job folder: every seed's scalars at step=seed, images, histograms
  and texts for the first seed only;
- on the terminal, a compact table with a line per seed instead of N full summaries.
"""

from __future__ import annotations

import dataclasses
import math
import sys
from pathlib import Path
from typing import TextIO

from omegaconf import DictConfig

from attnlab.config import validate
from attnlab.inputs import make_inputs
from attnlab.pipeline import JobSpec, compute_record
from attnlab.predictions import validate_expectations
from attnlab.progress import Progress
from attnlab.record import RECORD_FILE, Record, write_record
from attnlab.registry import get_variant
from attnlab.sinks.table import module_table, records_table, to_markdown, write_table_csv
from attnlab.sinks.terminal import print_record

TABLE_FILE = "comparison.csv"
SEED_DIR = "seed-{seed}"
TERMINAL_ROWS = 20  # per-seed lines printed before the rest are elided (all are in comparison.csv)


def check(cfg: DictConfig) -> None:
    """Everything that can be wrong with the request, before any work."""
    validate(cfg)
    validate_expectations(cfg.expect)
    get_variant(cfg.variant.name)
    get_variant("reference")


def seeds(cfg: DictConfig) -> range:
    return range(cfg.seed, cfg.seed + cfg.n_seeds)


def compute_records(cfg: DictConfig, progress: Progress | None = None) -> list[Record]:
    check(cfg)
    spec = JobSpec.from_cfg(cfg)
    phase = progress.phase if progress is not None else None
    records = []
    for seed in seeds(cfg):
        if progress is not None:
            progress.phase(f"seed {seed}: inputs")
        inputs = make_inputs(cfg.inputs, seed)
        records.append(compute_record(cfg, seed, inputs, spec=spec,
                                      phase=None if phase is None else (lambda p, s=seed: phase(f"seed {s}: {p}"))))
        if progress is not None:
            progress.advance()
    return records


def record_dir(job_dir: Path, record: Record, n_seeds: int) -> Path:
    return job_dir if n_seeds == 1 else job_dir / SEED_DIR.format(seed=record.seed)


def write_outputs(cfg: DictConfig, records: list[Record], job_dir: Path, progress: Progress | None = None) -> None:
    progress = progress or Progress(len(records), enabled=False)
    progress.phase("records")
    for record in records:
        write_record(record, record_dir(job_dir, record, len(records)))
    if len(records) == 1:
        _write_single(cfg, records[0], job_dir, progress)
    else:
        _write_seeds(cfg, records, job_dir, progress)


def _write_single(cfg: DictConfig, record: Record, job_dir: Path, progress: Progress) -> None:
    table = module_table(record)
    if cfg.log.table:
        progress.phase("table")
        write_table_csv(table, job_dir / TABLE_FILE)
    if cfg.log.terminal:
        progress.clear()
        print_record(record)
        print(f"record: {record.path}", file=sys.stdout)
    if cfg.log.tensorboard and record.ok:
        progress.phase("tensorboard")
        from attnlab.sinks.tensorboard import write_tensorboard

        write_tensorboard(record, job_dir, table_markdown=to_markdown(table.T),
                          images=cfg.log.images, histograms=cfg.log.histograms)


def _write_seeds(cfg: DictConfig, records: list[Record], job_dir: Path, progress: Progress) -> None:
    table = records_table(records)
    if cfg.log.table:
        progress.phase("table")
        write_table_csv(table, job_dir / TABLE_FILE, index=False)
    if cfg.log.terminal:
        progress.clear()
        print_seeds(records, job_dir / TABLE_FILE if cfg.log.table else None)
    if cfg.log.tensorboard:
        progress.phase("tensorboard")
        write_seeds_tensorboard(cfg, records, job_dir, table_markdown=to_markdown(table, floatfmt=".4g"))


def write_seeds_tensorboard(cfg: DictConfig, records: list[Record], job_dir: Path, *, table_markdown: str) -> None:
    """One run for the job: the first ok seed's images, histograms and texts (through the sink),
    then every ok seed's scalars at step=seed from one writer.

    The sink logs at step 0 and has no step parameter yet, so it is given the first seed without
    diagnostics (no stray step-0 point on the per-seed charts); its HParams session therefore
    has no metrics. With a `step` (and `writer`) parameter on write_tensorboard this becomes one
    call per seed.
    """
    from torch.utils.tensorboard import SummaryWriter

    from attnlab.sinks.tensorboard import CUSTOM_SCALARS_LAYOUT, scalar_values, write_tensorboard

    ok = [record for record in records if record.ok]
    if not ok:
        return
    first = dataclasses.replace(ok[0], diagnostics={}, reference_diagnostics={})
    write_tensorboard(first, job_dir, table_markdown=table_markdown,
                      images=cfg.log.images, histograms=cfg.log.histograms)
    writer = SummaryWriter(log_dir=str(job_dir), max_queue=10_000, flush_secs=3600, filename_suffix=".seeds")
    try:
        for record in ok:
            for tag, value in scalar_values(record).items():
                writer.add_scalar(tag, value, global_step=record.seed)
        writer.add_custom_scalars(CUSTOM_SCALARS_LAYOUT)
    finally:
        writer.close()


def _number(value: object) -> str:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return "—" if math.isnan(value) else f"{value:.4g}"
    return "—"


def seed_lines(records: list[Record]) -> list[str]:
    """A compact table: a line per seed, the first and last ones when there are many."""
    header = ("seed", "status", "first divergent", "max |Δ context|", "entropy", "findings")
    rows = [
        (str(r.seed), r.status, r.first_divergent_stage or "none", _number(r.diagnostics.get("divergence_context")),
         _number(r.diagnostics.get("weights_entropy_mean")),
         (" ".join(f.code for f in r.findings) or "—") if r.ok else (r.error or "")[:60])
        for r in records
    ]
    if len(rows) > TERMINAL_ROWS:
        head, tail = TERMINAL_ROWS - 5, 5
        rows = [*rows[:head], ("…", f"{len(rows) - head - tail} more", "", "", "", ""), *rows[-tail:]]
    widths = [max(len(row[i]) for row in (header, *rows)) for i in range(len(header))]
    fmt = lambda row: "  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip()  # noqa: E731
    return [fmt(header), *map(fmt, rows)]


def print_seeds(records: list[Record], table_path: Path | None, out: TextIO | None = None) -> None:
    out = out or sys.stdout
    first = records[0]
    n_failed = sum(not r.ok for r in records)
    codes = sorted({f.code for r in records for f in r.findings})
    print(f"attnlab · variant={first.variant} seeds={first.seed}..{records[-1].seed} ({len(records)}) "
          f"inputs={first.config.get('inputs', {}).get('kind')} n_tokens={first.n_tokens} d_in={first.d_in} "
          f"d_out={first.d_out} weights={first.config.get('weights')}", file=out)
    for line in seed_lines(records):
        print("  " + line, file=out)
    with_findings = sum(bool(r.findings) for r in records)
    print(f"findings: {', '.join(codes) or 'none'} ({with_findings}/{len(records)} seeds)"
          + (f"; {n_failed} failed" if n_failed else ""), file=out)
    if table_path is not None:
        print(f"table: {table_path}", file=out)
    print(f"records: {first.path.parent.parent / SEED_DIR.format(seed='*') / RECORD_FILE}", file=out)


def run_job(cfg: DictConfig, job_dir: Path) -> list[Record]:
    with Progress(cfg.n_seeds, label="seeds", enabled=bool(cfg.log.progress)) as progress:
        records = compute_records(cfg, progress)
        write_outputs(cfg, records, job_dir, progress)
    return records


__all__ = ["RECORD_FILE", "check", "compute_records", "run_job", "write_outputs"]
