"""A record as inline HTML for a notebook (`Result._repr_html_`): its findings in words, the shape
trace, and the variant / reference / difference maps of its first divergent stage and of the
weights; for a model run, the per-layer table and each layer's replaced-layer maps.

The pictures are the report's own (attnlab.sinks.html_images, attnlab.sinks.model_html): the
job's PNGs when it kept them (out_dir), else drawn from the record's values, grids and
full-resolution crops only (no image per head: a notebook cell stays small and quick at 1,024
tokens). Self-contained: inline CSS scoped to the output, data: URI PNGs, no script.
"""

from __future__ import annotations

import html
from collections.abc import Sequence

from attnlab.record import Record
from attnlab.reporting.job_heatmaps import heatmap_images
from attnlab.sinks.html_images import job_images, missing_note, stage_of, stage_pictures
from attnlab.sinks.model_html import layer_table_html, replaced_layer_html
from attnlab.sinks.model_lines import model_line, model_of
from attnlab.sinks.views import findings_html, shape_trace

STYLE = (".attnlab{font:13px/1.45 system-ui,sans-serif;color:#222} .attnlab h3{font-size:1.05em;margin:.8em 0 .3em}"
         " .attnlab .cards{display:flex;flex-wrap:wrap;gap:.8em;align-items:flex-start} .attnlab img{max-width:none}"
         " .attnlab li.error{color:#a40000} .attnlab li.warning{color:#8a5a00} .attnlab .note{color:#666}"
         " .attnlab table{border-collapse:collapse;font-size:12px}"
         " .attnlab th,.attnlab td{border:1px solid #ddd;padding:2px 6px;white-space:nowrap}"
         " .attnlab tr.differs td{background:#fff3e0}")


def shown_stages(record: Record) -> list[str]:
    """The first divergent stage (where there is one), then the weights."""
    return list(dict.fromkeys(s for s in (record.first_divergent_stage, "weights") if s))


def _pictures(record: Record) -> str:
    stages = shown_stages(record)
    images = {tag: image for tag, image in job_images(record).items() if stage_of(tag) in stages}
    if not images:
        try:
            images = dict(heatmap_images(record, stages=stages, per_head=False))
        except ValueError:  # a stage that is no matrix (a 0-d "weights" from a broken variant)
            images = {}
    if not images:
        return missing_note(record)
    return "".join(stage_pictures(images, stage, per_head=False) for stage in stages
                   if any(stage_of(tag) == stage for tag in images))


def _body(record: Record) -> str:
    status = "ok" if record.ok else f'<span class="error">failed: {html.escape(record.error or "")}</span>'
    where = f" · layer {record.model.layer_name}" if record.model is not None else ""
    divergent = record.first_divergent_stage or ("none" if record.ok else "not reached")
    head = (f"<b>{html.escape(record.variant.name)}</b> against {html.escape(record.reference.name)} · seed {record.seed}{where}"
            f" · {status} · first divergent stage: {html.escape(divergent)}")
    if not record.ok:
        return f"<p>{head}</p>{findings_html([record])}"
    return (f"<p>{head}</p>{findings_html([record])}<p class='note'>{html.escape(shape_trace(record))}</p>"
            f"{_pictures(record)}")


def wrapped(content: str) -> str:
    """HTML in attnlab's inline style (a notebook cell's output)."""
    return f'<div class="attnlab"><style>{STYLE}</style>{content}</div>'


def result_html(record: Record) -> str:
    """One record as a notebook cell's HTML output."""
    if record.model is not None:
        return results_html([record])
    return wrapped(_body(record))


def results_html(records: Sequence[Record]) -> str:
    """Several records: a model run's layers (the per-layer table, then each layer's findings and
    maps), or one section per record."""
    if not records:
        return wrapped("<p>no records</p>")
    if records[0].model is not None:
        sections = [f"<h3>{html.escape(model_line(records[0]))}</h3>", layer_table_html(records)]
        for record in records:
            sections.append(f"<h3>layer {html.escape(model_of(record).layer_name)}</h3>")
            sections.append(f"{findings_html([record])}{replaced_layer_html(record)}" if record.ok else _body(record))
        return wrapped("".join(sections))
    return wrapped("<hr>".join(_body(record) for record in records))


__all__ = ["result_html", "results_html", "wrapped"]
