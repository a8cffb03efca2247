"""The sweep's tables, kept current by a Hydra callback (registered in conf/config.yaml).

Why after jobs and not only at the end: Hydra skips `on_multirun_end` when a job raised, and a
Ctrl-C or a cluster's time limit skips it too, so jobs rebuild the sweep's tables from the
records on disk (in whichever process ran them: the basic launcher's, a joblib worker, a SLURM
node); that refresh writes comparison.csv only, the cheap table. A process refreshes after its
first job, after a failed one, and otherwise at most once every REFRESH_SECONDS: rebuilding
after every job cost a book-size job ~20 ms, more as the sweep grows. The basic launcher's
process loses nothing by it: the CLI finishes the tables when Hydra skips the end.
`on_multirun_end` writes every output, prints the table, and hands the failed records to the
CLI, which then exits non-zero: after the tables are written, not instead of them.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hydra.core.utils import JobReturn, JobStatus
from hydra.experimental.callback import Callback
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf

from attnlab import cli
from attnlab.record import RECORD_FILE, Record, write_record
from attnlab.sinks.terminal import reader_may_leave

if TYPE_CHECKING:
    from attnlab.aggregate import Report

REFRESH_SECONDS = 1.0


def sweep_dir(config: DictConfig) -> Path:
    return Path(str(config.hydra.sweep.dir))


def is_multirun(config: DictConfig) -> bool:
    return config.hydra.mode == RunMode.MULTIRUN


def record_job_failure(config: DictConfig, job_return: JobReturn) -> Path | None:
    """A job that raised before writing any record (e.g. a bad value for one sweep point) still
    gets its row: a failed record with the one-line error, in the job's folder."""
    job_dir = Path(config.hydra.runtime.output_dir)
    if job_return.status != JobStatus.FAILED or any(job_dir.rglob(RECORD_FILE)):
        return None
    # The dataclass field, not the `return_value` property: reading that re-raises the exception
    # and prints Hydra's "Error executing job" line, which the sweeper prints again at the end.
    exc = job_return._return_value
    if not isinstance(exc, BaseException):
        return None
    error = cli.one_line(exc)
    job_config = OmegaConf.to_container(config, resolve=False, enum_to_str=True)
    job_config.pop("hydra", None)
    record = Record(
        variant=str(OmegaConf.select(config, "variant.name", default="?")),
        seed=int(OmegaConf.select(config, "seed", default=0)),
        config=job_config,
        status="failed",
        error=error,
    )
    return write_record(record, job_dir)


def print_summary(report: Report, folder: Path) -> None:
    from attnlab.aggregate import OUTPUT_STEM, terminal_table

    with reader_may_leave():
        print(f"\nsweep: {len(report.records)} job(s) in {folder}")
        print(terminal_table(report.jobs))
        print(f"tables: {folder / OUTPUT_STEM}.csv .md .html (open the .html in a browser)", flush=True)


def finish(folder: Path) -> list[str]:
    """All of the sweep's outputs, the terminal table; returns the failed records' paths."""
    from attnlab.aggregate import rebuild

    report, _ = rebuild(folder)
    print_summary(report, folder)
    return [str(r.path) for r in report.records if not r.ok]


class SweepTables(Callback):
    """Keeps `<sweep dir>/comparison.csv` current after each job; all of `comparison.{csv,md,html}`
    at the end of a sweep (or, when Hydra skips the end because a job raised or the user pressed
    Ctrl-C, from the CLI wrapper, which knows the sweep folders started in its process)."""

    def __init__(self) -> None:
        self.refreshed_at: float | None = None  # time.monotonic() of this process's last refresh

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        cli.open_sweeps.append(sweep_dir(config))

    def on_job_end(self, config: DictConfig, job_return: JobReturn, **kwargs: Any) -> None:
        if not is_multirun(config):
            return
        failed = record_job_failure(config, job_return) is not None or job_return.status == JobStatus.FAILED
        if not failed and self.refreshed_at is not None and time.monotonic() - self.refreshed_at < REFRESH_SECONDS:
            return
        from attnlab.aggregate import rebuild  # pandas: paid by sweeps only, not by single runs

        _, problems = rebuild(sweep_dir(config), suffixes=(".csv",))
        for problem in problems:
            print(f"attnlab: skipped record: {problem}", file=sys.stderr)
        self.refreshed_at = time.monotonic()

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        folder = sweep_dir(config)
        cli.open_sweeps.remove(folder)
        cli.failed_jobs[:] = finish(folder)


__all__ = ["SweepTables", "finish", "print_summary", "record_job_failure", "sweep_dir"]
