"""A sweep's tables: refreshed after jobs by a Hydra callback, finished by attnlab's sweeper.

After a job (in whichever process ran it: the basic launcher's, a joblib worker, a SLURM node),
`SweepTables` rebuilds the sweep's comparison.csv from the records on disk, so a sweep cut short
(a Ctrl-C, a cluster's time limit) still has its table. A process refreshes after its first
job, after a failed one, and otherwise at most once every REFRESH_SECONDS: rebuilding after
every job cost a share of each job that grows with the sweep (benchmarks/README.md); a refresh
skipped so is made before the next job starts, so a long job never leaves the table behind.

`finish` ends the sweep: every sink's `write_sweep` (comparison.csv and .md, comparison.html; a
training sweep's `write_training_sweep`),
the sweep's table on the terminal (printed with log.terminal=false too: that switches off each
job's summary, so a long sweep prints only its table), then the outcome. attnlab's sweeper calls it once every job returned, and when
the launch was interrupted; it raises `FailedRecords` when a record failed, which the CLI turns
into exit code 1 after the tables are written. Under another sweeper (`hydra/sweeper=basic`) the
callback's `on_multirun_end` writes the tables instead (a callback cannot change the outcome).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hydra.core.utils import JobReturn, JobStatus
from hydra.experimental.callback import Callback
from omegaconf import DictConfig, OmegaConf

from attnlab.app.config_values import wants_training
from attnlab.errors import FailedRecords

if TYPE_CHECKING:
    from attnlab.record import RecordError
    from attnlab.reporting.aggregate import Report

REFRESH_SECONDS = 1.0


def sweep_dir(config: DictConfig) -> Path:
    return Path(str(config.hydra.sweep.dir))


def _report_problems(problems: list[RecordError]) -> None:
    for problem in problems:
        print(f"attnlab: skipped record: {problem}", file=sys.stderr)


def write_tables(config: DictConfig) -> list[str]:
    """Every enabled sink's sweep output from the records under the sweep folder; returns the
    failed records' paths. A sweep that ran no job gets no tables."""
    from attnlab.reporting.aggregate import find_record_files

    folder = sweep_dir(config)
    if not find_record_files([folder]):
        return []
    report, problems = write_sweep_outputs(folder, config)
    _report_problems(problems)
    print_summary(report, folder)
    return [str(r.path) for r in report.records if not r.ok]


def write_sweep_outputs(folder: Path, config: DictConfig) -> tuple[Report, list[RecordError]]:
    """Every enabled sink's sweep output (`write_sweep`: comparison.csv, .md and .html, TensorBoard's
    curves and sessions) from the records under `folder`; the report and the records skipped."""
    from attnlab.app.job_settings import sink_settings
    from attnlab.reporting.aggregate import rebuild
    from attnlab.sinks.base import build_sinks

    sinks = [sink for sink in build_sinks(sink_settings(config)).values() if hasattr(sink, "write_sweep")]

    def write(report: Report) -> None:
        for sink in sinks:
            sink.write_sweep(report, folder)

    return rebuild(folder, write)


def print_summary(report: Report, folder: Path) -> None:
    """The sweep's table for a terminal, and where the full tables are."""
    from attnlab.reporting.aggregate import terminal_table
    from attnlab.shown_paths import display_path
    from attnlab.sinks.terminal import reader_may_leave

    tables = [f"comparison{s}" for s in (".csv", ".md", ".html") if (folder / f"comparison{s}").exists()]
    with reader_may_leave():
        print(f"\nsweep: {_counted(report, folder)} in {display_path(folder)}")
        print(terminal_table(report.jobs))
        if tables:
            browser = " (open the .html in a browser)" if tables[-1].endswith(".html") else ""
            suffixes = " ".join(name[len("comparison"):] for name in tables[1:])
            print(f"tables: {display_path(folder / tables[0])} {suffixes}{browser}".rstrip(), flush=True)


def _counted(report: Report, folder: Path) -> str:
    """`12 job(s)`, and their records where a job has several (a model's layers, seeds): `12 job(s), 24 records`."""
    jobs = {_job_folder(record.path, folder) for record in report.records}
    records = len(report.records)
    return f"{len(jobs)} job(s)" + (f", {records} records" if records != len(jobs) else "")


def _job_folder(path: Path | None, folder: Path) -> Path | None:
    """The job folder a record is in: the sweep's folder's child that holds it (a layer's or a seed's
    record sits one folder deeper)."""
    if path is None:
        return None
    try:
        return Path(folder) / Path(path).resolve().relative_to(Path(folder).resolve()).parts[0]
    except ValueError:  # a record outside the sweep's folder (read from elsewhere): its own folder
        return Path(path).parent


def finish(config: DictConfig, complete: bool, missing: Sequence[str] = ()) -> None:
    """The end of a sweep (attnlab's sweeper calls it): the tables, then the outcome: failed
    records and `missing` jobs (launched, no record: a worker that died) make it exit 1. Tables
    that cannot be written (a full disk, a read-only folder) are named stale; the records stand."""
    try:
        failed = write_tables(config)
        _training_tables(config)
    except OSError as exc:
        _stale(config, exc)
        raise
    for job in missing:
        print(f"attnlab: no record: job {job}", file=sys.stderr)
    if complete and (failed or missing):
        raise FailedRecords(failed, missing)


def _training_tables(config: DictConfig) -> None:
    """A sweep of training jobs: its pooled verdicts and tables (attnlab.training.sweep_table),
    through every sink's `write_training_sweep`, and on the terminal."""
    from attnlab.app.job_settings import sink_settings
    from attnlab.shown_paths import display_path
    from attnlab.sinks.base import build_sinks
    from attnlab.sinks.training_files import write_training_sweep
    from attnlab.training.sweep_table import pooled_sweep

    folder = sweep_dir(config)
    pooled = pooled_sweep(folder)
    if pooled is None:
        return
    write_training_sweep(build_sinks(sink_settings(config)), pooled, folder)
    tables = f"tables: {display_path(folder / 'training_comparison.md')} .csv" if (folder / "training_comparison.md").exists() else ""
    print(f"\n{pooled.text}{tables}", flush=True)


def refresh_table(config: DictConfig) -> None:
    """The sweep's comparison.csv from the records on disk (no other table: the cheap one). A
    refresh that cannot write is one warning: the next jobs still run, and still write records."""
    from attnlab.reporting.aggregate import rebuild
    from attnlab.reporting.rows import TABLE_FILE
    from attnlab.sinks.table import write_csv_report

    folder = sweep_dir(config)
    try:
        _, problems = rebuild(folder, lambda report: write_csv_report(report, folder / TABLE_FILE))
    except OSError as exc:
        _stale(config, exc)
        return
    _report_problems(problems)


def _stale(config: DictConfig, error: OSError) -> None:
    """One line: why the tables could not be written, and which records are intact."""
    from attnlab.reporting.aggregate import find_record_files

    folder = sweep_dir(config)
    try:
        intact = len(find_record_files([folder]))
    except OSError:
        intact = 0
    print(f"attnlab: warning: {error}; the tables in {folder} are stale, its {intact} record(s) are intact "
          f"(rebuild: attnlab compare {folder})", file=sys.stderr)


def _tables_on(config: DictConfig) -> bool:
    return config.hydra.mode.name == "MULTIRUN" and bool(config.log.get("table"))


class SweepTables(Callback):
    """Keeps `<sweep dir>/comparison.csv` current after jobs (see the module's docstring)."""

    def __init__(self) -> None:
        self.refreshed_at: float | None = None  # time.monotonic() of this process's last refresh
        self.skipped = False  # a job ended since then without a refresh

    def on_job_start(self, config: DictConfig, **kwargs: Any) -> None:
        """The trailing refresh: jobs that ended within REFRESH_SECONDS of a refresh are in the
        table before the next job starts (a long job after fast ones left it at the first)."""
        if self.skipped and _tables_on(config):
            self._refresh(config)

    def on_job_end(self, config: DictConfig, job_return: JobReturn, **kwargs: Any) -> None:
        if not _tables_on(config):
            return
        # the task returns its failed records' paths (attnlab.app.job_task.run_task)
        failed = job_return.status == JobStatus.FAILED or bool(job_return.return_value)
        if wants_training(config) and not failed:
            return  # it wrote training.json, no record for this table (its tables are the sweep's end's)
        if not failed and self.refreshed_at is not None and time.monotonic() - self.refreshed_at < REFRESH_SECONDS:
            self.skipped = True
            return
        self._refresh(config)

    def _refresh(self, config: DictConfig) -> None:
        refresh_table(config)
        self.refreshed_at, self.skipped = time.monotonic(), False

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        if OmegaConf.select(config, "hydra.sweeper.finish"):
            return  # attnlab's sweeper finished the sweep itself
        write_tables(config)


__all__ = ["SweepTables", "finish", "print_summary", "refresh_table", "sweep_dir", "write_tables"]
