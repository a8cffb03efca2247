"""`comparison.html` of a sweep and `report.html` of a single run: self-contained pages that open
offline, from a laptop or a cluster copy.

Inline CSS, images embedded as base64 PNG at their native size, no scripts, no external assets.
The pages read the records, the tables built from them and the heatmap PNGs each job wrote beside
its record.json (attnlab.sinks.html_images); they never recompute attention. A sweep's page
opens with how it was started and links to each job's page (attnlab.sinks.html_header), its
curves (attnlab.reporting.sweep_plots, inline SVG), then a card per configuration
(its weights and findings), what each variant costs (profile=true), the summary and the tables.
A single run's page is worded for one record: its findings, every stage's maps, the reference
and the variant side by side.
"""

from __future__ import annotations

import html
import math
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import pandas as pd

from attnlab.record import Record, write_atomic
from attnlab.reporting.aggregate import COST_COLUMNS, Report, group_labels, summary_view
from attnlab.reporting.rows import job_rows
from attnlab.reporting.sweep_plots import DEFAULT_DIAGNOSTICS, plots_html
from attnlab.sinks.base import REPORT_FILE, JobInfo
from attnlab.sinks.html_header import header_html
from attnlab.sinks.html_images import card_pictures, record_pictures
from attnlab.sinks.model_html import write_model_html
from attnlab.sinks.views import findings_html

if TYPE_CHECKING:
    from attnlab.training.job import TrainingResult

HTML_FILE = "comparison.html"


class HtmlSink:
    """`log.html`: a sweep's comparison.html, each job's report.html (inside a model: the effect
    against the layer and each layer's head grid), and each job's heatmap
    PNGs that both pages show (`images`: log.images; off, only the variant's weights, the picture
    of a card); `plots`: the diagnostics drawn against each swept numeric key (`plots.diagnostics`)."""

    def __init__(self, plots: Sequence[str] | None = None, images: bool = True) -> None:
        self.plots = list(plots) if plots is not None else list(DEFAULT_DIAGNOSTICS)
        self.images = images

    def write(self, records: Sequence[Record], job: JobInfo) -> None:
        from attnlab.reporting.job_heatmaps import job_heatmaps

        first = next((r for r in records if r.ok), records[0])
        if first.ok:  # drawn once per job, beside record.json: the pages show these (log.images=false: the card's)
            job_heatmaps(first, job.dir, card_only=not self.images)
        if first.model is not None:  # a run inside a model: its page (attnlab.sinks.model_html)
            write_model_html(records, Path(job.dir) / REPORT_FILE)
        else:  # a sweep's job too: its comparison.html links each job's own page
            write_html_report(Report(records), Path(job.dir) / REPORT_FILE, plots=self.plots)

    def write_sweep(self, report: Report, folder: Path) -> None:
        write_html_report(report, Path(folder) / HTML_FILE, plots=self.plots)

    def write_training(self, result: TrainingResult, job: JobInfo) -> None:
        from attnlab.training.page import page_html

        (Path(job.dir) / "training.html").write_text(page_html(result.as_dict()))


def write_html_report(report: Report, path: Path, plots: Sequence[str] = DEFAULT_DIAGNOSTICS) -> Path:
    page = render_record_html(report.records[0]) if len(report.records) == 1 else \
        render_html(report, plots=plots, folder=Path(path).parent)
    write_atomic(Path(path), page)
    return Path(path)


STYLE = """
body { font: 14px/1.45 system-ui, sans-serif; margin: 1.5em; color: #222; }
h1 { font-size: 1.4em; } h2 { font-size: 1.15em; margin-top: 1.8em; border-bottom: 1px solid #ccc; }
.scroll { overflow-x: auto; }
table { border-collapse: collapse; font-size: 12px; }
th, td { border: 1px solid #ddd; padding: 3px 6px; text-align: left; white-space: nowrap; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
th { background: #f3f3f3; position: sticky; top: 0; }
tr:nth-child(even) td { background: #fafafa; }
tr.differs td { background: #fff3e0; }
.cards { display: flex; flex-wrap: wrap; gap: 1em; align-items: flex-start; }
.card { border: 1px solid #ddd; border-radius: 6px; padding: 0.6em 0.9em; }
img { max-width: none; }
.failed { color: #a40000; } .note { color: #666; font-style: italic; }
li.error { color: #a40000; } li.warning { color: #8a5a00; }
dl.header { display: grid; grid-template-columns: max-content auto; gap: 0.2em 1em; }
dl.header dt { font-weight: 600; } dl.header dd { margin: 0; } ul.jobs { margin: 0; padding-left: 1.2em; }
"""


def configuration_cards(report: Report) -> str:
    """One card per configuration (the summary's rows): its first seed's weights, its findings."""
    labels = group_labels(report.jobs)
    by_label: dict[str, list[Record]] = {}
    for label, record in zip(labels, report.records):
        by_label.setdefault(label, []).append(record)
    cards = []
    for label, records in by_label.items():
        shown = next((r for r in records if r.ok), records[0])
        seed = f'<p class="note">pictures of seed {shown.seed}</p>' if shown.ok else ""
        cards.append(f'<div class="card"><h3>{html.escape(label)}</h3>'
                     f"{card_pictures(shown) if shown.ok else ''}{seed}{findings_html(records)}</div>")
    return '<div class="cards">' + "".join(cards) + "</div>"


def table_html(table: pd.DataFrame, index: bool = True, highlight: frozenset[int] = frozenset()) -> str:
    """A table, text left-aligned and numbers right-aligned (class `num`), every cell escaped;
    the rows numbered in `highlight` (from 0) marked (class `differs`)."""
    frame = table.reset_index() if index else table
    head = "".join(f"<th>{html.escape(str(c))}</th>" for c in frame.columns)
    rows = []
    for i, values in enumerate(frame.itertuples(index=False, name=None)):
        mark = ' class="differs"' if i in highlight else ""
        rows.append(f"<tr{mark}>" + "".join(_cell_html(v) for v in values) + "</tr>")
    return f'<div class="scroll"><table><thead><tr>{head}</tr></thead><tbody>{"".join(rows)}</tbody></table></div>'


def _cell_html(value: object) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "<td>—</td>"
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return f'<td class="num">{value:.4g}</td>' if isinstance(value, float) else f'<td class="num">{value}</td>'
    return f"<td>{html.escape(str(value))}</td>"


def summary_html(report: Report) -> str:
    """The summary (a row per diagnostic, a column per configuration) without the rows that are
    0 ± 0 in every configuration; one line says how many were left out."""
    view = summary_view(report.summary)
    if view.empty:
        return "<p>no records</p>"
    zero = view.apply(lambda row: all(str(cell) in ("0", "0 ± 0") for cell in row), axis=1)
    note = (f'<p class="note">{int(zero.sum())} diagnostics that are 0 ± 0 in every configuration are not shown '
            "(they are in comparison.csv).</p>" if zero.any() else "")
    return table_html(view[~zero]) + note


PROFILE_BARS = tuple(cost for cost in COST_COLUMNS if not cost[0].endswith("_vs_reference"))  # a ratio is no bar
LOG_RANGE = 20.0  # a chart whose largest bar is this many times its smallest gets a log axis


def profile_values(jobs: pd.DataFrame, column: str) -> pd.Series:
    """Mean per variant in the jobs' order, led by the reference's own value where the record
    holds its ratio (`forward_ms_vs_reference`: the reference's is the variant's over the ratio)."""
    means = jobs.groupby("variant", sort=False)[column].mean()
    ratio = f"{column}_vs_reference"
    if ratio in jobs and jobs[ratio].notna().any():
        reference = (jobs[column] / jobs[ratio]).dropna()
        if len(reference):
            means = pd.concat([pd.Series({"(reference)": float(reference.mean())}), means])
    return means.dropna()


def profile_chart(jobs: pd.DataFrame) -> str:
    """Inline SVG bars of the profile columns (profile=true): one chart per column, every chart in
    the same order (the reference first, then the variants as in the table), a log axis where
    the values span more than LOG_RANGE; empty when nothing was profiled."""
    present = [cost for cost in PROFILE_BARS if cost[0] in jobs and jobs[cost[0]].notna().any()]
    if not present or "variant" not in jobs:
        return ""
    names = list(dict.fromkeys(["(reference)", *jobs["variant"].astype(str)]))
    longest = max(len(name) for name in names)
    charts = []
    for column, label, factor in present:
        values = profile_values(jobs, column) * factor
        values = values[[name for name in names if name in values.index]]
        positive = values[values > 0]
        log = len(positive) > 1 and positive.max() / positive.min() > LOG_RANGE
        charts.append(_bars_svg(values, f"{label}{' (log scale)' if log else ''}", longest, log))
    return "<h2>What each variant costs (profile=true)</h2>" + "".join(charts)


def _bars_svg(values: pd.Series, caption: str, longest: int, log: bool) -> str:
    bar_h, width, name_w = 18, 260, max(170, 8 + int(7.2 * longest))  # ~7 px a character at 12 px: no name cut
    top = float(values.max()) or 1.0
    floor = float(values[values > 0].min()) / 2 if log else 0.0

    def length(value: float) -> float:
        if log:
            return width * math.log10(max(value, floor) / floor) / math.log10(top / floor)
        return width * value / top

    rows = []
    for i, (name, value) in enumerate(values.items()):
        y = i * (bar_h + 4)
        colour = "#999" if name == "(reference)" else "#3b6ea5"
        rows.append(f'<text x="{name_w - 6}" y="{y + 13}" text-anchor="end">{html.escape(str(name))}</text>'
                    f'<rect x="{name_w}" y="{y}" width="{max(1.0, length(value)):.1f}" height="{bar_h}" fill="{colour}"/>'
                    f'<text x="{name_w + length(value) + 4:.1f}" y="{y + 13}">{value:.4g}</text>')
    height = len(values) * (bar_h + 4)
    return (f'<figure><figcaption>{html.escape(caption)}</figcaption><svg xmlns="http://www.w3.org/2000/svg" '
            f'width="{name_w + width + 80}" height="{height}" font-size="12">{"".join(rows)}</svg></figure>')


def _page(title: str, sections: list[str]) -> str:
    return ('<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
            f"<title>{html.escape(title)}</title><style>{STYLE}</style></head>\n<body>\n"
            + "\n".join(sections) + "\n</body></html>\n")


def render_html(report: Report, title: str = "attnlab comparison", plots: Sequence[str] = DEFAULT_DIAGNOSTICS,
                folder: Path | None = None) -> str:
    """A sweep's page (several records); with the `folder` it is written to, a header says how the
    sweep was started, what it swept, against what, and links each job's page."""
    failed = sum(not r.ok for r in report.records)
    status = f'{len(report.records)} record(s)' + (f', <span class="failed">{failed} failed</span>' if failed else "")
    return _page(title, [
        f"<h1>{html.escape(title)}</h1><p>{status}</p>",
        header_html(report, folder) if folder is not None else "",
        plots_html(report, plots),  # a sweep over a numeric key reads first as curves
        "<h2>Per configuration: attention weights and findings</h2>",
        '<p class="note">Every card\'s weights share one scale: linear 0 to 1, and log 1e-4 to 1 beside it '
        "(grey: 0, a masked key); a difference is on its own scale, symmetric about 0.</p>",
        configuration_cards(report),
        profile_chart(report.jobs),
        "<h2>Summary (mean ± std over seeds)</h2>",
        summary_html(report),
        "<h2>What differs between jobs</h2>",
        table_html(report.differs, index=False),
        "<h2>Every job</h2>",
        table_html(report.jobs, index=False),
    ])


def render_record_html(record: Record) -> str:
    """A single run's page: what it found, every stage's maps, the reference and the variant side by side."""
    title = f"attnlab run: {record.variant.name} against {record.reference.name}, seed {record.seed}"
    status = "ok" if record.ok else f'<span class="failed">failed: {html.escape(record.error or "")}</span>'
    rows = job_rows([record])
    # a row per column of comparison.csv, reference | variant; the job's folder is where the page is
    table = pd.DataFrame(rows).set_index("module").T.drop(index="path", errors="ignore")
    differs = frozenset(i for i, (_, row) in enumerate(table.iterrows()) if len(row) == 2 and _differ(*row))
    divergent = record.first_divergent_stage or ("none" if record.ok else "not reached (the run failed)")
    return _page(title, [
        f"<h1>{html.escape(title)}</h1><p>{status} · first divergent stage: {html.escape(divergent)}</p>",
        # what the run did other than asked (its own width or token count), as the terminal says it
        "".join(f'<p class="note">note: {html.escape(note)}</p>' for note in record.notes),
        "<h2>Findings</h2>", findings_html([record]),
        predictions_html(record),
        f"<h2>Heatmaps (batch item shown: {_shown_batch(record)})</h2>" if record.ok else "",
        record_pictures(record) if record.ok else "",
        "<h2>The reference and the variant</h2>",
        '<p class="note">highlighted: the rows where the variant differs from the reference</p>' if differs else "",
        table_html(table, highlight=differs),
    ])


def predictions_html(record: Record) -> str:
    """Each prediction the user made (`expect.KEY=VALUE`): what was expected and what was observed."""
    if not record.predictions:
        return ""
    items = "".join(f'<li class="{"" if p.passed else "failed"}">{html.escape(p.sentence)}</li>'
                    for p in record.predictions)
    passed = sum(p.passed for p in record.predictions)
    return f"<h2>Predictions ({passed}/{len(record.predictions)} passed)</h2><ul>{items}</ul>"


def _shown_batch(record: Record) -> int:
    return int((record.config.get("show") or {}).get("batch", 0))


def _differ(reference: object, variant: object) -> bool:
    """Do two cells of the reference | variant table differ (two missing values do not)?"""
    missing = [v is None or (isinstance(v, float) and math.isnan(v)) for v in (reference, variant)]
    return not all(missing) and (any(missing) or reference != variant)


__all__ = ["HTML_FILE", "HtmlSink", "REPORT_FILE", "profile_chart", "render_html",
           "render_record_html", "table_html", "write_html_report"]
