"""From records on disk to a comparison: the records and the tables the sinks and `attnlab compare` show.

Everything here starts from record files, never from a running job, so the same tables come out
of a live sweep (rebuilt after jobs), an interrupted one, or folders copied back from a cluster
(`attnlab compare`). Writing files is the sinks' part (attnlab.sinks.table, attnlab.sinks.html).
Three views of the same records:

- jobs: one row per job (`attnlab.sinks.table.records_table`), every column;
- summary: one row per configuration (everything but the seed), mean and std over seeds of every
  numeric diagnostic, so a seed's luck is not mistaken for an effect of the variant;
- differs: the jobs table without the columns that are the same in every row, which is where
  the eye should go first.
"""

from __future__ import annotations

import math
import re
import shutil
from collections.abc import Callable, Iterable
from functools import cached_property, lru_cache
from pathlib import Path
from typing import Any

import pandas as pd

from attnlab.record import RECORD_FILE, Record, RecordError, read_record
from attnlab.reporting.rows import KEY_COLUMNS, SWEPT_ATTR, job_order, records_table

IDENTITY_COLUMNS = ("variant", "seed")  # kept in every view: they say which job a row is
PATH_COLUMNS = ("path",)  # unique per row by construction: never a "difference"


class Report:
    """The records of a comparison and the three tables built from them.

    The tables are built when first asked for: a sweep's refresh after a job writes
    comparison.csv from the records alone, and should not pay for them.
    """

    def __init__(self, records: Iterable[Record]):
        self.records: list[Record] = job_order(list(records))

    @cached_property
    def jobs(self) -> pd.DataFrame:
        return records_table(self.records)

    @cached_property
    def summary(self) -> pd.DataFrame:
        return summary_table(self.jobs)

    @cached_property
    def differs(self) -> pd.DataFrame:
        return differs_table(self.jobs)


def find_record_files(paths: Iterable[Path]) -> list[Path]:
    """Every record.json at or under `paths`, each once, in a stable order.

    Temp files of an interrupted atomic write are named `.record.json.*.tmp` and never match.
    """
    found: dict[Path, Path] = {}
    for path in map(Path, paths):
        candidates = [path] if path.is_file() else sorted(path.rglob(RECORD_FILE))
        for candidate in candidates:
            found.setdefault(candidate.resolve(), candidate)
    return sorted(found.values())


READ_CACHE_SIZE = 4096  # records remembered per process; a record's values above 65,536 elements are not inlined


@lru_cache(maxsize=READ_CACHE_SIZE)
def _read_version(path: Path, mtime_ns: int, size: int) -> Record:
    return read_record(path)


def _read_cached(path: Path) -> Record:
    """read_record, remembered per process while the file's (mtime, size) is unchanged.

    A sweep rebuilds its tables after jobs; parsing every stage value of every record again each
    time made a 30-job sweep spend most of its time re-reading the same files.
    """
    stat = path.stat()
    return _read_version(path.resolve(), stat.st_mtime_ns, stat.st_size)


def load_records(files: Iterable[Path]) -> tuple[list[Record], list[RecordError]]:
    """Read every file; an unreadable or partial one becomes a RecordError and is skipped."""
    records, problems = [], []
    for file in map(Path, files):
        try:
            records.append(_read_cached(file))
        except OSError as exc:
            problems.append(RecordError(f"{file}: {type(exc).__name__}: {exc}"))
        except RecordError as exc:
            problems.append(exc)
    return records, problems


def config_columns(jobs: pd.DataFrame) -> list[str]:
    """The columns that are configuration: the key columns, then the config values the jobs
    differ in (`attnlab.reporting.rows.swept_keys`, carried in the table's attrs)."""
    return [*KEY_COLUMNS, *jobs.attrs.get(SWEPT_ATTR, [])]


def diagnostic_columns(jobs: pd.DataFrame) -> list[str]:
    """The numeric columns that are measurements, not configuration."""
    config = set(config_columns(jobs))
    return [c for c in jobs.columns if c not in config and pd.api.types.is_numeric_dtype(jobs[c])]


def group_labels(jobs: pd.DataFrame) -> pd.Series:
    """'unscaled' when only the variant tells configurations apart, 'gqa · num_kv_heads=2' otherwise:
    every config column but the seed that differs between jobs."""
    grouping = [c for c in config_columns(jobs) if c not in IDENTITY_COLUMNS]
    varying = [c for c in grouping if c in jobs and varies(jobs[c])]
    parts = [jobs["variant"].astype(str)] + [f"{c}=" + jobs[c].map(_label_value) for c in varying]
    return pd.concat(parts, axis=1).agg(" · ".join, axis=1)


def _label_value(value: object) -> str:
    return "None" if value is None or (isinstance(value, float) and pd.isna(value)) else str(value)


def varies(column: pd.Series) -> bool:
    """Two values or more among the jobs that have one: a size a failed job never reached is
    missing, not a value the sweep swept."""
    return column.dropna().astype(str).nunique() > 1


def summary_table(jobs: pd.DataFrame) -> pd.DataFrame:
    """One row per configuration: ('jobs', 'count'), ('failed', 'count'), then (diagnostic, mean|std).

    Failed jobs have no diagnostics; they are counted, and the statistics are over the rest.
    """
    if jobs.empty:
        return pd.DataFrame()
    label = group_labels(jobs).rename("configuration")
    grouped = jobs.groupby(label, sort=False)
    counts = pd.concat(
        {("jobs", "count"): grouped.size(), ("failed", "count"): grouped["status"].agg(lambda s: int((s == "failed").sum()))},
        axis=1,
    )
    diagnostics = diagnostic_columns(jobs)
    if not diagnostics:  # e.g. every job failed
        return counts
    return pd.concat([counts, grouped[diagnostics].agg(["mean", "std"])], axis=1)


def summary_view(summary: pd.DataFrame) -> pd.DataFrame:
    """The summary as text, transposed (a row per diagnostic, a column per configuration): a
    few configurations by ~50 diagnostics reads down a page instead of off its edge."""
    if summary.empty:
        return pd.DataFrame()
    cells = {}
    for name in dict.fromkeys(summary.columns.get_level_values(0)):
        if (name, "count") in summary:
            cells[name] = summary[(name, "count")].astype(int).astype(str)
        else:
            cells[name] = [_mean_std(m, s) for m, s in zip(summary[(name, "mean")], summary[(name, "std")])]
    return pd.DataFrame(cells, index=summary.index).T


def _mean_std(mean: float, std: float) -> str:
    if pd.isna(mean):
        return "—"
    return f"{mean:.4g}" if pd.isna(std) else f"{mean:.4g} ± {std:.2g}"


def differs_table(jobs: pd.DataFrame) -> pd.DataFrame:
    """The jobs table without the columns that hold one value in every row (variant and seed stay)."""
    keep = [
        c for c in jobs.columns
        if c in IDENTITY_COLUMNS or (c not in PATH_COLUMNS and varies(jobs[c]))
    ]
    return jobs[keep]


def terminal_table(jobs: pd.DataFrame, width: int | None = None) -> str:
    """The jobs table for a terminal, fitted to its width (`width`, else COLUMNS or the terminal's).

    Columns: variant, the swept keys (the key columns and config values that differ between
    jobs), status, the first divergent stage, the findings (a failed job's error), the
    largest difference of the output from the reference, inside a model the effect on its
    predictions (KL mean, top-1 agreement), and with profile=true what each costs
    (forward ms, its ratio to the reference's, peak MiB, GFLOPs). Long cells are cut with "…" rather than
    wrapped; every column is in comparison.csv/.md/.html.
    """
    width = width or shutil.get_terminal_size((120, 24)).columns
    if jobs.empty:
        return "no jobs"
    swept = swept_columns(jobs)
    # inside a model: what the change did to the predictions; profile=true: what each one costs
    costs = [(column, label, factor) for column, label, factor in (*EFFECT_COLUMNS, *COST_COLUMNS)
             if column in jobs and jobs[column].notna().any()]
    headers = ["variant", *swept, "status", "first divergent", "findings", "|Δ output|", *(c[1] for c in costs)]
    rows = []
    for i, (_, job) in enumerate(jobs.iterrows()):
        failed = job.get("status") == "failed"
        rows.append([
            _text(job["variant"]), *[_text(swept[c][i]) for c in swept], _text(job.get("status")),
            _text(job.get("first_divergent_stage")) if not failed else "—",
            (_text(job.get("error")) if failed else _text(job.get("findings"))) or "—",
            _divergence_text(_output_divergence(job)),
            *[_number_text(_scaled(job.get(column), factor)) for column, _, factor in costs],
        ])
    return _fit(headers, rows, width, shrink_order=["findings", *reversed(swept), "first divergent", "variant"])


def swept_columns(jobs: pd.DataFrame) -> dict[str, list[Any]]:
    """{column: values} of what differs between jobs besides the variant: the key columns, then
    the config values the jobs differ in (`dropout`, `variant.params.alpha`)."""
    return {c: list(jobs[c]) for c in config_columns(jobs)
            if c != "variant" and c in jobs and varies(jobs[c])}


def _output_divergence(job: pd.Series) -> object:
    """The output's divergence; NaN when the output has non-finite values (never the context's in
    its place); the context's for records without an output stage (format 1)."""
    value = job.get("divergence_output")
    if value is None or pd.isna(value):
        non_finite = job.get("non_finite_output")
        return float("nan") if isinstance(non_finite, (int, float)) and non_finite > 0 else job.get("divergence_context")
    return value


# a run inside a model (attnlab.model.effect): (column, label, factor), as the terminal table shows them
EFFECT_COLUMNS = (("effect_kl_mean", "KL mean", 1.0), ("effect_top1_agreement", "top-1", 1.0))
# the profile's columns as every table and chart shows them: (column, label, factor to its unit)
COST_COLUMNS = (("forward_ms", "forward ms", 1.0), ("forward_ms_vs_reference", "× reference", 1.0),
                ("peak_bytes", "peak MiB", 2**-20), ("flops", "GFLOPs", 1e-9))


def _scaled(value: object, factor: float) -> object:
    return value * factor if isinstance(value, (int, float)) and not pd.isna(value) else value


def _text(value: object) -> str:
    return "—" if value is None or (isinstance(value, float) and pd.isna(value)) else printable(str(value))


# C0 and C1 control characters (ESC starts a terminal's escape sequences): never printed from a record
CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def printable(text: str) -> str:
    """Text from a record as a terminal may show it: control characters removed."""
    return CONTROL.sub("", text)


def _number_text(value: object) -> str:
    return f"{value:.4g}" if isinstance(value, (int, float)) and not pd.isna(value) else "—"


def _divergence_text(value: object) -> str:
    """As _number_text, but a NaN divergence (non-finite output) reads `nan`, never blank."""
    return "nan" if isinstance(value, float) and math.isnan(value) else _number_text(value)


def _fit(headers: list[str], rows: list[list[str]], width: int, shrink_order: list[str]) -> str:
    """Columns two spaces apart, cut (with "…") in `shrink_order` until a line fits in `width`."""
    widths = [max(len(row[i]) for row in [headers, *rows]) for i in range(len(headers))]
    floor = {i: min(widths[i], max(len(headers[i]), 8)) for i in range(len(headers))}
    excess = sum(widths) + 2 * (len(widths) - 1) - width
    for name in shrink_order:
        if excess <= 0:
            break
        i = headers.index(name)
        cut = min(excess, widths[i] - floor[i])
        widths[i] -= cut
        excess -= cut

    def cell(text: str, w: int, right: bool) -> str:
        text = text if len(text) <= w else text[: w - 1] + "…"
        return text.rjust(w) if right else text.ljust(w)

    numeric = {len(headers) - 1}  # the divergence, right-aligned
    lines = ["  ".join(cell(c, w, i in numeric) for i, (c, w) in enumerate(zip(row, widths))).rstrip()
             for row in [headers, *rows]]
    return "\n".join(line if len(line) <= width else line[: width - 1] + "…" for line in lines)  # cut, and said so


def _snapshot(folder: Path) -> set[tuple[Path, int]]:
    return {(f, f.stat().st_mtime_ns) for f in find_record_files([folder]) if f.exists()}


def rebuild(folder: Path, write: Callable[[Report], object]) -> tuple[Report, list[RecordError]]:
    """Rebuild a folder's outputs from its records: `write(report)` writes them.

    Parallel workers rebuild concurrently and the last writer wins; a writer whose snapshot went
    stale while it wrote (another job's record appeared) rebuilds again, so the files on disk end
    up covering every record written before the last rebuild finished.
    """
    folder = Path(folder)
    for _ in range(5):
        before = _snapshot(folder)
        records, problems = load_records(sorted(path for path, _ in before))
        report = Report(records)
        write(report)
        if _snapshot(folder) == before:
            break
    return report, problems


__all__ = [
    "COST_COLUMNS", "Report", "diagnostic_columns", "differs_table", "find_record_files", "group_labels", "load_records", "rebuild",
    "summary_table", "summary_view", "swept_columns", "terminal_table", "varies",
]
