"""The training job's HTML page: which classes ran, the verdict, the table, and the curves (training
loss, causal accuracy) of both sides as inline SVG, each seed a line."""

from __future__ import annotations

import html
from collections.abc import Sequence
from typing import Any

COLOURS = {"reference": "#1f77b4", "variant": "#d62728"}
WIDTH, HEIGHT, PAD = 440, 240, 40


def _x(x: float, x_max: float) -> float:
    return PAD + x / x_max * (WIDTH - 2 * PAD)


def _y(y: float, y_max: float) -> float:
    return HEIGHT - PAD - y / y_max * (HEIGHT - 2 * PAD)


def _polyline(points: Sequence[tuple[float, float]], x_max: float, y_max: float, colour: str) -> str:
    scaled = " ".join(f"{_x(x, x_max):.1f},{_y(y, y_max):.1f}" for x, y in points)
    return f'<polyline fill="none" stroke="{colour}" stroke-width="1.2" points="{scaled}"/>'


def _ticks(x_max: float, y_max: float) -> str:
    """Axis ticks with their values: training steps below, the measure on the left (five each)."""
    marks = []
    for i in range(5):
        x, y = x_max * i / 4, y_max * i / 4
        marks.append(f'<line x1="{_x(x, x_max):.1f}" y1="{HEIGHT - PAD}" x2="{_x(x, x_max):.1f}" y2="{HEIGHT - PAD + 4}" '
                     f'stroke="#555"/><text x="{_x(x, x_max):.1f}" y="{HEIGHT - PAD + 15}" font-size="10" '
                     f'text-anchor="middle">{x:.0f}</text>')
        marks.append(f'<line x1="{PAD - 4}" y1="{_y(y, y_max):.1f}" x2="{PAD}" y2="{_y(y, y_max):.1f}" stroke="#555"/>'
                     f'<text x="{PAD - 6}" y="{_y(y, y_max) + 3:.1f}" font-size="10" text-anchor="end">{y:.2g}</text>')
    return "".join(marks) + (f'<text x="{WIDTH / 2:.0f}" y="{HEIGHT - 2}" font-size="10" text-anchor="middle">'
                             f'training step</text>')


def curve_svg(data: dict[str, Any], title: str, series: str) -> str:
    """`series`: "loss" (the training loss at every step) or "causal_accuracy" (at each evaluation)."""
    lines: list[tuple[str, list[tuple[float, float]]]] = []
    for run in data["seeds"]:
        for side in ("reference", "variant"):
            if series == "loss":
                lines.append((side, list(enumerate(run[side]["losses"], start=1))))
            else:
                lines.append((side, [(e["step"], e[series]) for e in run[side]["evals"]]))
    x_max = max(x for _, points in lines for x, _ in points) or 1
    y_max = max(y for _, points in lines for _, y in points) or 1
    body = "".join(_polyline(points, x_max, y_max, COLOURS[side]) for side, points in lines)
    return (f'<figure><svg width="{WIDTH}" height="{HEIGHT}" role="img" aria-label="{html.escape(title)}">'
            f'<rect x="{PAD}" y="{PAD}" width="{WIDTH - 2 * PAD}" height="{HEIGHT - 2 * PAD}" fill="none" stroke="#ccc"/>'
            f'{_ticks(x_max, y_max)}{body}<text x="{PAD}" y="{PAD - 8}" font-size="12">{html.escape(title)}</text>'
            f'</svg></figure>')


def page_html(data: dict[str, Any]) -> str:
    verdict = "".join(f"<li>{html.escape(s)}</li>" for s in data["verdict"])
    rows = "".join(f"<tr><td>{html.escape(r['what'])}</td><td>{r['reference']}</td><td>{r['variant']}</td>"
                   f"<td>{html.escape(r['noise'])}</td></tr>" for r in data["table"])
    classes = "".join(f'<li><span style="color:{COLOURS[side]}">{side}</span>: {html.escape(text)}</li>'
                      for side, text in data["classes"].items())
    return (f"<!doctype html><html><head><meta charset='utf-8'><title>attnlab training: {html.escape(data['variant'])}"
            f"</title></head><body><h1>Training {html.escape(data['settings']['task'])}: {html.escape(data['variant'])}</h1>"
            f"<ul>{classes}</ul><h2>Verdict</h2><ul>{verdict}</ul>"
            f"{curve_svg(data, 'training loss', 'loss')}{curve_svg(data, 'causal accuracy', 'causal_accuracy')}"
            f"<h2>Mean ± std over {len(data['seeds'])} seed(s)</h2><table border='1' cellpadding='4'>"
            f"<tr><th>measure</th><th>reference</th><th>{html.escape(data['variant'])}</th><th>clear of seed noise</th></tr>"
            f"{rows}</table></body></html>")
