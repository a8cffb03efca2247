"""The top of a sweep's page: the command that started it, what it swept, the reference, its
folder, and a link to each job's own page, so the page says what it compares before any number."""

from __future__ import annotations

import html
import os
from pathlib import Path
from urllib.parse import quote

from attnlab.record import Record
from attnlab.reporting.aggregate import Report, swept_columns
from attnlab.reporting.metrics import run_label
from attnlab.reporting.multirun import sweep_command
from attnlab.shown_paths import display_path
from attnlab.sinks.base import REPORT_FILE


def header_html(report: Report, folder: Path) -> str:
    """A definition list: command (where the folder's multirun.yaml tells it), swept, reference,
    folder, jobs (each linked to its report.html where it has one)."""
    command = sweep_command(folder)
    items = [("command", f"<code>{html.escape(command)}</code>")] if command else []
    items += [("swept", html.escape(swept_text(report) or "nothing: one configuration")),
              ("reference", html.escape(", ".join(dict.fromkeys(r.reference.name for r in report.records)))),
              ("folder", f"<code>{html.escape(display_path(folder))}</code>"),
              ("jobs", job_links(report, Path(folder)))]
    return '<dl class="header">' + "".join(f"<dt>{name}</dt><dd>{value}</dd>" for name, value in items) + "</dl>"


def swept_text(report: Report) -> str:
    """`variant: reference, unscaled · d_out: 2, 8`: each swept column's values, in the table's order."""
    parts = []
    for name in ["variant", *swept_columns(report.jobs)]:
        distinct = list(dict.fromkeys(report.jobs[name].dropna().astype(str)))  # a failed job's missing size is no value
        if len(distinct) > 1:
            parts.append(f"{name}: {', '.join(distinct)}")
    return " · ".join(parts)


def job_links(report: Report, folder: Path) -> str:
    """Each job by its variant, swept values and seed, a link to its page where it has one."""
    keys = [key for key in swept_columns(report.jobs) if key not in ("variant", "seed")]
    items = [_job_item(record, run_label(record, keys), folder) for record in report.records]
    return '<ul class="jobs">' + "".join(items) + "</ul>"


def _job_item(record: Record, label: str, folder: Path) -> str:
    failed = "" if record.ok else ' <span class="failed">failed</span>'
    page = record.path.parent / REPORT_FILE if record.path is not None else None
    if page is None or not page.exists():
        return f"<li>{html.escape(label)}{failed}</li>"
    href = quote(Path(os.path.relpath(page, folder)).as_posix())  # relative: the folder can be copied whole
    return f'<li><a href="{html.escape(href)}">{html.escape(label)}</a>{failed}</li>'


__all__ = ["header_html", "job_links", "swept_text"]
