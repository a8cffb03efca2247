"""`comparison.html`: one self-contained page that opens offline, from a laptop or a cluster copy.

Inline CSS, images embedded as base64 PNG, no scripts, no external assets. The page reads the
records and the tables built from them; it never recomputes attention. Per configuration it
shows a small heatmap of the variant's attention weights (first seed) and its findings in words;
a sweep over a numeric key opens with its curves (attnlab.reporting.sweep_plots, inline SVG).
"""

from __future__ import annotations

import base64
import html
from pathlib import Path
from typing import Sequence

import pandas as pd

from attnlab.reporting.aggregate import COST_COLUMNS, Report, group_labels, summary_view
from attnlab.record import Record, write_atomic
from attnlab.sinks.base import JobInfo
from attnlab.sinks.model_html import write_model_html
from attnlab.sinks.terminal import no_findings_message
from attnlab.reporting.sweep_plots import DEFAULT_DIAGNOSTICS, plots_html

HTML_FILE = "comparison.html"


class HtmlSink:
    """`log.html`: a sweep's comparison.html (a single job has no page of its own, but a run inside a
    model has model.html); `plots`: the
    diagnostics drawn against each swept numeric key (`plots.diagnostics`)."""

    def __init__(self, plots: Sequence[str] | None = None) -> None:
        self.plots = list(plots) if plots is not None else list(DEFAULT_DIAGNOSTICS)

    def write_sweep(self, report: Report, folder: Path) -> None:
        write_html_report(report, Path(folder) / HTML_FILE, plots=self.plots)

    def write(self, records: Sequence[Record], job: JobInfo) -> None:
        """A run inside a model has a page of its own: model.html (attnlab.sinks.model_html)."""
        if records and records[0].model:
            write_model_html(records, job.dir)


def write_html_report(report: Report, path: Path, plots: Sequence[str] = DEFAULT_DIAGNOSTICS) -> Path:
    write_atomic(Path(path), render_html(report, plots=plots))
    return Path(path)

STYLE = """
body { font: 14px/1.45 system-ui, sans-serif; margin: 1.5em; color: #222; }
h1 { font-size: 1.4em; } h2 { font-size: 1.15em; margin-top: 1.8em; border-bottom: 1px solid #ccc; }
.scroll { overflow-x: auto; }
table { border-collapse: collapse; font-size: 12px; }
th, td { border: 1px solid #ddd; padding: 3px 6px; text-align: right; white-space: nowrap; }
th { background: #f3f3f3; position: sticky; top: 0; }
tr:nth-child(even) td { background: #fafafa; }
.cards { display: flex; flex-wrap: wrap; gap: 1em; }
.card { border: 1px solid #ddd; border-radius: 6px; padding: 0.6em 0.9em; max-width: 420px; }
.card img { max-width: 380px; height: auto; image-rendering: pixelated; }
.failed { color: #a40000; } .note { color: #666; font-style: italic; }
li.error { color: #a40000; } li.warning { color: #8a5a00; }
"""


def weights_heatmap_html(record: Record) -> str:
    """An <img> of the variant's attention weights, or a sentence saying why there is none."""
    from attnlab.reporting.heatmap import render_heatmap_views, to_png_bytes  # Pillow: only for a sweep's page

    weights = record.heads_view("weights", batch=int((record.config.get("show") or {}).get("batch", 0)))
    if "weights" not in record.stage_shapes:
        return '<p class="note">no weights captured</p>'
    if weights is None:
        shape = "x".join(map(str, record.stage_shapes["weights"]))
        return f'<p class="note">weights ({shape}) too large to inline in the record</p>'
    labels = record.labels if weights.shape[-1] == weights.shape[-2] == len(record.labels) else None
    try:
        image = render_heatmap_views(weights, title=f"weights · {record.variant} · seed {record.seed}",
                                     row_labels=labels, col_labels=labels)["main"]
    except ValueError as exc:  # e.g. a 0-d "weights" from a broken variant
        return f'<p class="note">weights not drawable: {html.escape(str(exc))}</p>'
    data = base64.b64encode(to_png_bytes(image)).decode("ascii")
    return f'<img alt="attention weights of {html.escape(record.variant)}" src="data:image/png;base64,{data}">'


def findings_html(records: list[Record]) -> str:
    """Each distinct finding once, in words, with the seeds it came from (or each failure)."""
    items: dict[tuple[str, str], list[int]] = {}
    for record in records:
        if not record.ok:
            items.setdefault(("error", f"failed: {record.error}"), []).append(record.seed)
        for finding in record.findings:
            text = f"[{finding.code} @ {finding.stage}] {finding.message}"
            items.setdefault((finding.severity, text), []).append(record.seed)
    if not items:
        return f"<p>{html.escape(no_findings_message(records[0]).capitalize())}.</p>"
    lines = [
        f'<li class="{html.escape(severity)}">{html.escape(text)} <span class="note">(seed {", ".join(map(str, seeds))})</span></li>'
        for (severity, text), seeds in items.items()
    ]
    return "<ul>" + "".join(lines) + "</ul>"


def configuration_cards(report: Report) -> str:
    """One card per configuration (the summary's rows): heatmap of its first seed, its findings."""
    labels = group_labels(report.jobs)
    by_label: dict[str, list[Record]] = {}
    for label, record in zip(labels, report.records):
        by_label.setdefault(label, []).append(record)
    cards = []
    for label, records in by_label.items():
        shown = next((r for r in records if r.ok), records[0])
        cards.append(
            f'<div class="card"><h3>{html.escape(label)}</h3>'
            f"{weights_heatmap_html(shown) if shown.ok else ''}{findings_html(records)}</div>"
        )
    return '<div class="cards">' + "".join(cards) + "</div>"


def table_html(table: pd.DataFrame, index: bool = True) -> str:
    body = table.to_html(index=index, na_rep="—", float_format=lambda v: f"{v:.4g}", border=0, escape=True)
    return f'<div class="scroll">{body}</div>'


PROFILE_BARS = tuple(cost for cost in COST_COLUMNS if not cost[0].endswith("_vs_reference"))  # a ratio is no bar


def profile_chart(jobs: pd.DataFrame) -> str:
    """Inline SVG bars of the profile columns (profile=true), one bar per variant (mean over
    seeds), one chart per column; empty when nothing was profiled."""
    present = [cost for cost in PROFILE_BARS if cost[0] in jobs and jobs[cost[0]].notna().any()]
    if not present or "variant" not in jobs:
        return ""
    charts = []
    for column, label, factor in present:
        means = (jobs.groupby("variant")[column].mean() * factor).dropna().sort_values()
        top = float(means.max()) or 1.0
        longest = max(len(str(variant)) for variant in means.index) if len(means) else 0
        bar_h, width, name_w = 18, 260, max(170, 8 + int(7.2 * longest))  # ~7 px a character at 12 px: no name cut
        rows = []
        for i, (variant, value) in enumerate(means.items()):
            y = i * (bar_h + 4)
            rows.append(f'<text x="{name_w - 6}" y="{y + 13}" text-anchor="end">{html.escape(str(variant))}</text>'
                        f'<rect x="{name_w}" y="{y}" width="{max(1.0, width * value / top):.1f}" height="{bar_h}" '
                        f'fill="#3b6ea5"/><text x="{name_w + width * value / top + 4:.1f}" y="{y + 13}">'
                        f'{value:.4g}</text>')
        height = len(means) * (bar_h + 4)
        charts.append(f'<figure><figcaption>{label}</figcaption><svg xmlns="http://www.w3.org/2000/svg" '
                      f'width="{name_w + width + 80}" height="{height}" font-size="12">{"".join(rows)}</svg></figure>')
    return "<h2>What each variant costs (profile=true)</h2>" + "".join(charts)


def render_html(report: Report, title: str = "attnlab comparison", plots: Sequence[str] = DEFAULT_DIAGNOSTICS) -> str:
    failed = sum(not r.ok for r in report.records)
    status = f'{len(report.records)} record(s)' + (f', <span class="failed">{failed} failed</span>' if failed else "")
    sections = [
        f"<h1>{html.escape(title)}</h1><p>{status}</p>",
        plots_html(report, plots),  # a sweep over a numeric key reads first as curves
        "<h2>Per configuration: attention weights and findings</h2>",
        configuration_cards(report),
        profile_chart(report.jobs),
        "<h2>Summary (mean ± std over seeds)</h2>",
        table_html(summary_view(report.summary)),
        "<h2>What differs between jobs</h2>",
        table_html(report.differs, index=False),
        "<h2>Every job</h2>",
        table_html(report.jobs, index=False),
    ]
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>{html.escape(title)}</title><style>{STYLE}</style></head>\n<body>\n"
        + "\n".join(sections)
        + "\n</body></html>\n"
    )


__all__ = ["HTML_FILE", "HtmlSink", "findings_html", "profile_chart", "render_html", "weights_heatmap_html",
           "write_html_report"]
