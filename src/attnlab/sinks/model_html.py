"""`report.html` for a run inside a model: the per-layer table the terminal prints, the effect of
the change against the layer, and for each layer the replaced layer's variant, reference and
difference at its first divergent stage (the weights where none differs), the head grid of the
model's own attention weights on the text's tokens, and its findings.

Offline like comparison.html (inline SVG and base64 PNG). It reads the records only.
"""

from __future__ import annotations

import base64
import html
import math
from collections.abc import Sequence
from pathlib import Path

from attnlab.record import Record, write_atomic
from attnlab.reporting.heatmap import render_head_grid, render_heatmap
from attnlab.reporting.job_heatmaps import EncodedHeatmap, encoded, heatmap_images, stage_scale
from attnlab.reporting.sweep_plots import Curve, Point, curve_svg
from attnlab.sinks.html_images import stage_pictures
from attnlab.sinks.model_lines import effect_line, effect_positions, inputs_given, layer_table, model_line, model_of

# what the plots draw against the layer: (the field of record.model.effect, its title)
EFFECT_PLOTS = (("kl_mean", "KL mean"), ("kl_max", "KL max"), ("top1_agreement", "top-1 agreement"),
                ("loss_changed", "loss with the change"), ("hidden_relative_divergence", "final hidden states, relative change"))
STYLE = ("body{font:14px/1.45 system-ui,sans-serif;margin:1.5em;color:#222} img{max-width:100%;height:auto}"
         " li.error{color:#a40000} li.warning{color:#8a5a00} .cards{display:flex;flex-wrap:wrap;gap:1em}"
         " table{border-collapse:collapse;font-size:12px} th,td{border:1px solid #ddd;padding:3px 6px;white-space:nowrap}"
         " td:last-child{white-space:normal;overflow-wrap:anywhere;min-width:16em;max-width:36em}"  # findings wrap
         " tr.differs td{background:#fff3e0}")


def layer_table_html(records: Sequence[Record]) -> str:
    """The terminal's per-layer table (attnlab.sinks.model_lines.layer_table); a layer whose
    replacement diverges is highlighted."""
    header, *rows = layer_table(records)
    head = "".join(f"<th>{html.escape(c)}</th>" for c in header)
    body = "".join(f'<tr{" class=differs" if r.first_divergent_stage or not r.ok else ""}>'
                   + "".join(f"<td>{html.escape(c)}</td>" for c in row) + "</tr>" for r, row in zip(records, rows))
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def replaced_layer_html(record: Record) -> str:
    """The replaced layer's variant, reference and difference at its first divergent stage, then
    its attention weights (where they are not that stage): the grids and crops the report draws,
    not each head."""
    first = record.first_divergent_stage or "weights"
    return "".join(_stage_section(record, stage) for stage in dict.fromkeys((first, "weights")))


def _stage_section(record: Record, stage: str) -> str:
    try:
        images = dict(heatmap_images(record, stages=[stage], per_head=False))
    except ValueError:  # a stage that is no matrix (a 0-d output of a broken variant)
        images = {}
    if not images:
        why = "not captured" if stage in record.missing_stages or stage not in record.variant.shapes else "not a matrix"
        return f'<p class="note">no picture of {html.escape(stage)} ({why})</p>'
    return f"<p>the replaced layer at {html.escape(stage)}: variant, reference, difference</p>" + stage_pictures(images, stage)


def effect_curves(records: Sequence[Record]) -> list[Curve]:
    """One curve per measure against the layer (a line for the variant); none for a single layer."""
    with_effect = [r for r in records if r.ok and model_of(r).effect is not None]
    if len(with_effect) < 2:
        return []
    return [Curve(title, "layer", _lines(with_effect, key)) for key, title in EFFECT_PLOTS
            if not any(math.isnan(getattr(model_of(r).effect, key)) for r in with_effect)]  # a classifier has no loss


def _lines(records: Sequence[Record], key: str) -> dict[str, list[Point]]:
    """The variant's line of one measure against the layer; an encoder–decoder's, a line per stack."""
    lines: dict[str, list[Point]] = {}
    for r in records:
        name = f"{r.variant.name} ({model_of(r).stack})" if model_of(r).stack else r.variant.name
        lines.setdefault(name, []).append(Point(float(model_of(r).layer), float(getattr(model_of(r).effect, key)), 0.0, 1))
    return lines


def head_grid_html(record: Record) -> str:
    """The model's own attention weights at this layer: every head in one grid, then the shown head
    (`show.head`) with the text's tokens as labels."""
    weights = record.reference.heads_view("weights")  # (H, T, T)
    if weights is None:
        return '<p class="note">no weights kept for this layer</p>'
    head = min(int((record.config.get("show") or {}).get("head", 0)), weights.shape[0] - 1)
    labels = record.labels if weights.shape[-1] == len(record.labels) else None
    layer = model_of(record).layer_name
    title = f"layer {layer} · head {head}"
    scale = stage_scale("weights", weights)  # 0 to 1, as every weights map: not the smallest weight's 1e-26
    labelled = encoded(lambda: render_heatmap(weights[head], title=title, row_labels=labels, col_labels=labels,
                                              value_range=scale.value_range, legend=scale.legend,
                                              zero_grey=scale.zero_grey), weights[head], "model head", title, labels)
    return "".join(_img(image, f"{what} of layer {layer}")
                   for image, what in ((model_head_grid(record), "head grid"), (labelled, f"head {head}")))


def _img(image: EncodedHeatmap, alt: str) -> str:
    data = base64.b64encode(image.png).decode("ascii")
    return f'<img alt="{html.escape(alt)}" src="data:image/png;base64,{data}">'


def model_head_grid(record: Record) -> EncodedHeatmap:
    """The PNG of the model's own weights at the record's layer, every head on one colour scale."""
    weights = record.reference.heads_view("weights")  # (H, T, T)
    assert weights is not None  # drawn for a record whose weights were captured
    title = f"layer {model_of(record).layer_name} · the model's own weights"
    scale = stage_scale("weights", weights)
    return encoded(lambda: render_head_grid(weights, title=title, value_range=scale.value_range, legend=scale.legend,
                                            zero_grey=scale.zero_grey), weights, "model grid", title)


def _layer_section(record: Record) -> str:
    title = f"layer {model_of(record).layer_name}: {model_of(record).attention}"
    if not record.ok:
        return f"<h2>{html.escape(title)}</h2><p class='error'>failed: {html.escape(record.error or '')}</p>"
    measured = model_of(record).effect
    effect = (f"<p>{html.escape(effect_line(measured, effect_positions(record), 'effect on the output'))}</p>"
              if measured is not None else "")
    findings = "".join(f'<li class="{f.severity}">[{html.escape(f.code)} @ {f.stage}] {html.escape(f.message)}</li>'
                       for f in record.findings)
    return (f"<h2>{html.escape(title)}</h2><p>against {html.escape(record.reference.name)}</p>{effect}"
            f"<ul>{findings or '<li>no findings</li>'}</ul>{replaced_layer_html(record)}"
            f"<h3>the model's own weights</h3>{head_grid_html(record)}")


def render_model_html(records: Sequence[Record]) -> str:
    first = records[0]
    curves = "".join(f"<figure>{curve_svg(c)}</figure>" for c in effect_curves(records))
    measured = model_of(first).end_to_end
    end_to_end = (f"<p>{html.escape(effect_line(measured, first.n_tokens, 'end to end'))}</p>"
                  if measured is not None else "")
    return (f"<!doctype html><html><head><meta charset='utf-8'><title>attnlab · {html.escape(model_of(first).model)}"
            f"</title><style>{STYLE}</style></head><body><h1>{html.escape(model_line(first))}</h1>"
            f"<p>variant {html.escape(first.variant.name)} · {html.escape(inputs_given(first).replace('_', ' '))}: {html.escape(' '.join(first.labels))}</p>"
            f"{end_to_end}"
            f"{layer_table_html(records)}"
            f"{'<h2>the effect against the layer</h2><div class=cards>' + curves + '</div>' if curves else ''}"
            + "".join(_layer_section(r) for r in records) + "</body></html>")


def write_model_html(records: Sequence[Record], path: Path) -> Path:
    write_atomic(Path(path), render_model_html(records))
    return Path(path)
