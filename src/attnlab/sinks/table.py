"""Table sink: `comparison.csv` in every job folder, `comparison.csv` and `comparison.md` in a sweep's.

A job's table is the reference and the variant side by side (one row per seed for an n_seeds
job); a sweep's is one row per job, and its markdown adds the summary (mean ± std over seeds)
and the "what differs" view. The csv is written by `attnlab.reporting.rows.write_rows_csv`, the one writer
of every comparison.csv.
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from attnlab.record import Record, write_atomic
from attnlab.reporting.effect_grid import write_effect_grid
from attnlab.reporting.rows import TABLE_FILE, job_rows, sweep_rows, write_rows_csv
from attnlab.sinks.base import JobInfo

if TYPE_CHECKING:
    import pandas as pd

    from attnlab.reporting.aggregate import Report
    from attnlab.training.job import TrainingResult
    from attnlab.training.sweep_table import TrainingSweep

MARKDOWN_FILE = "comparison.md"


class TableSink:
    """`log.table`: the comparison tables of a job and of a sweep; a training job's and a training
    sweep's training_comparison.md and .csv; an intervention sweep's layer × head grid."""

    def write(self, records: Sequence[Record], job: JobInfo) -> None:
        write_rows_csv(job_rows(records), job.dir / TABLE_FILE)
        write_effect_grid(records, job.dir)  # a run of one edit per head (intervene.head=all)

    def write_sweep(self, report: Report, folder: Path) -> None:
        if not report.records:  # a sweep of training jobs: its tables are training_comparison.*
            return
        write_csv_report(report, Path(folder) / TABLE_FILE)
        write_markdown_report(report, Path(folder) / MARKDOWN_FILE)
        write_effect_grid(report.records, Path(folder))

    def write_training(self, result: TrainingResult, job: JobInfo) -> None:
        from attnlab.sinks.training_files import write_table

        write_table(result.as_dict(), Path(job.dir))

    def write_training_sweep(self, sweep: TrainingSweep, folder: Path) -> None:
        from attnlab.sinks.training_files import write_sweep_table

        write_sweep_table(sweep, Path(folder))


def write_csv_report(report: Report, path: Path) -> Path:
    """The sweep's comparison.csv; none without records (no empty file beside a training sweep's tables)."""
    if not report.records:
        return path
    return write_rows_csv(sweep_rows(report.records), path)


def to_markdown(table: pd.DataFrame, floatfmt: str = ".4g") -> str:
    return escaped(table).to_markdown(floatfmt=floatfmt)


def escaped(table: pd.DataFrame) -> pd.DataFrame:
    """Text cells with HTML escaped: a markdown viewer renders raw HTML (a record's `<script>`)."""
    return table.map(lambda value: html.escape(value) if isinstance(value, str) else value)


def markdown_report(report: Report) -> str:
    from attnlab.reporting.aggregate import summary_view

    sections = [
        "# attnlab comparison",
        f"{len(report.records)} record(s).",
        "## Summary (mean ± std over seeds)",
        to_markdown(summary_view(report.summary), floatfmt="g") if not report.summary.empty else "no records",
        "## What differs between jobs",
        to_markdown(report.differs),
        "## Every job",
        to_markdown(report.jobs),
    ]
    return "\n\n".join(sections) + "\n"


def write_markdown_report(report: Report, path: Path) -> Path:
    write_atomic(Path(path), markdown_report(report))
    return Path(path)


__all__ = ["MARKDOWN_FILE", "TableSink", "markdown_report", "write_csv_report", "write_markdown_report"]
