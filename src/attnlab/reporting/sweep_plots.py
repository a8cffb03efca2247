"""A sweep as curves: chosen diagnostics against each numeric key the sweep swept, one line per
variant, mean ± std over seeds.

From a Report to `Curve`s (the numbers: the TensorBoard sink logs them as scalars) and to inline
SVG figures (the HTML sink embeds them: no script, no file fetched when the page is viewed). The
swept keys are the sweep table's own (`attnlab.reporting.aggregate.swept_columns`: the key columns, then the
config values that differ between records); a key is plotted when every job's value is a number
and it takes two values or more. The seed is never an axis: seeds are what mean ± std pools.
"""

from __future__ import annotations

import fnmatch
import html
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, TypeGuard

import numpy as np

from attnlab.record import Record
from attnlab.reporting.aggregate import Report, swept_columns

# the long-context story: entropy (and normalised), the peak weight, the attention-sink mass, the effect on the context
DEFAULT_DIAGNOSTICS = ("weights_entropy_mean", "weights_entropy_norm_mean", "weights_row_max_mean",
                       "weights_first_token_mass", "divergence_context")
POOLED = ("seed",)  # the seeds are the samples of mean ± std, never an axis
PALETTE = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22",
           "#17becf")


@dataclass(frozen=True)
class Point:
    x: float
    mean: float
    std: float  # 0 for a single seed
    n: int  # the seeds behind the mean


@dataclass(frozen=True)
class Curve:
    """One diagnostic against one swept key: {line label: points in order of x}."""

    diagnostic: str
    key: str
    lines: dict[str, list[Point]]

    @property
    def xs(self) -> list[float]:
        return sorted({p.x for points in self.lines.values() for p in points})

    @property
    def integer_steps(self) -> bool:
        """Every swept value is an integer: TensorBoard can use it as the step itself."""
        return all(float(x).is_integer() for x in self.xs)


def numeric_swept_keys(swept: dict[str, list[Any]]) -> dict[str, list[float]]:
    """{key: one value per job} of the swept keys (`swept_columns`) whose values are all numbers
    (bools are not) and take two values or more; a job without one (a size its failed run never
    reached) is NaN there, and has no point on any curve anyway."""
    keys = {}
    for key, values in swept.items():
        present = [v for v in values if not _missing(v)]
        if key in POOLED or not all(_is_number(v) for v in present):
            continue
        if len({float(v) for v in present}) > 1:
            keys[key] = [math.nan if _missing(v) else float(v) for v in values]
    return keys


def _missing(value: object) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value))


def _is_number(value: object) -> TypeGuard[float | np.integer[Any] | np.floating[Any]]:
    return isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, (bool, np.bool_)) \
        and math.isfinite(float(value))


def record_values(record: Record) -> dict[str, float | None]:
    """A record's diagnostics, plus `<name>_h<i>` for each head of its per-head values (the
    per-head context divergence has no table column of its own)."""
    values = dict(record.variant.diagnostics)
    for name, per_head in record.head_diagnostics.items():
        for h, value in enumerate(per_head):
            values.setdefault(f"{name}_h{h}", value)
    return values if record.ok else {}


def chosen_diagnostics(patterns: Sequence[str], available: Sequence[str]) -> tuple[list[str], list[str]]:
    """(the names to plot, the patterns that matched none): each pattern is a name or a glob
    (`divergence_context_h*`: one plot per head), in the order given."""
    names, missing = [], []
    for pattern in patterns:
        matches = [name for name in available if fnmatch.fnmatchcase(name, pattern)]
        if not matches:
            missing.append(pattern)
        names.extend(sorted(matches, key=_natural) if any(c in pattern for c in "*?[") else matches)
    return list(dict.fromkeys(names)), missing


def _natural(name: str) -> tuple[str, int]:
    """`_h2` before `_h10`."""
    stem, _, number = name.rpartition("_h")
    return (stem, int(number)) if number.isdigit() else (name, -1)


def line_labels(report: Report, key: str, swept: dict[str, list[Any]]) -> list[str]:
    """Each job's line on the plot against `key`: its variant, plus every other swept key but
    the seed (`rope · d_out=8`), so jobs that differ in something else are never pooled."""
    jobs = report.jobs
    others = [k for k in swept if k not in (key, *POOLED, "variant")]
    return [" · ".join([str(variant), *(f"{k}={_short(swept[k][i])}" for k in others)])
            for i, variant in enumerate(jobs["variant"])]


def _short(value: object) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


def sweep_curves(report: Report, diagnostics: Sequence[str] = DEFAULT_DIAGNOSTICS) -> tuple[list[Curve], list[str]]:
    """Every (swept numeric key, diagnostic) curve with at least one finite point, keys in the
    table's order, diagnostics in the order asked; and the asked names no record has."""
    if not report.records:
        return [], []
    values = [record_values(r) for r in report.records]  # report.jobs rows are in report.records order
    available = list(dict.fromkeys(name for v in values for name in v))
    names, missing = chosen_diagnostics(diagnostics, available)
    swept = swept_columns(report.jobs)
    numeric = numeric_swept_keys(swept)
    curves = []
    for key, xs in numeric.items():
        labels = line_labels(report, key, swept)
        for name in names:
            samples: dict[str, dict[float, list[float]]] = {}
            for label, x, job in zip(labels, xs, values):
                value = job.get(name)
                if _is_number(value):
                    samples.setdefault(label, {}).setdefault(x, []).append(float(value))
            lines = {label: [_point(x, got) for x, got in sorted(by_x.items())] for label, by_x in samples.items()}
            if lines:
                curves.append(Curve(name, key, dict(sorted(lines.items()))))
    return curves, missing


def _point(x: float, values: list[float]) -> Point:
    return Point(x, float(np.mean(values)), float(np.std(values, ddof=1)) if len(values) > 1 else 0.0, len(values))


# --- inline SVG ---------------------------------------------------------------------------------

WIDTH, HEIGHT, LEGEND_W = 400, 250, 190
LEFT, RIGHT, TOP, BOTTOM = 58, 12, 26, 42


def log_axis(xs: Sequence[float]) -> bool:
    """A log axis when the values are positive and span a factor of 16 or more (16 ... 4096 tokens)."""
    return min(xs) > 0 and max(xs) / min(xs) >= 16


def curve_svg(curve: Curve) -> str:
    """A line plot: one polyline per line label, mean ± std as a shaded band, the swept values
    as the x ticks (log-spaced when they span a factor of 16), a legend of the labels."""
    xs = curve.xs
    log = log_axis(xs)
    fx = (lambda x: math.log2(x)) if log else (lambda x: x)
    x_lo, x_hi = fx(xs[0]), fx(xs[-1])
    lows = [p.mean - p.std for pts in curve.lines.values() for p in pts]
    highs = [p.mean + p.std for pts in curve.lines.values() for p in pts]
    y_lo, y_hi = min(lows), max(highs)
    pad = (y_hi - y_lo) * 0.06 or abs(y_hi) * 0.1 or 1.0
    y_lo, y_hi = y_lo - pad, y_hi + pad
    plot_w, plot_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM

    def px(x: float) -> float:
        return LEFT + (plot_w * (fx(x) - x_lo) / (x_hi - x_lo) if x_hi > x_lo else plot_w / 2)

    def py(y: float) -> float:
        return TOP + plot_h * (y_hi - y) / (y_hi - y_lo)

    parts = [f'<rect x="{LEFT}" y="{TOP}" width="{plot_w}" height="{plot_h}" fill="none" stroke="#999"/>']
    ticks = _ticks(y_lo, y_hi)
    for y, text in zip(ticks, tick_texts(ticks)):
        parts.append(f'<line x1="{LEFT}" x2="{LEFT + plot_w}" y1="{py(y):.1f}" y2="{py(y):.1f}" stroke="#eee"/>'
                     f'<text x="{LEFT - 4}" y="{py(y) + 4:.1f}" text-anchor="end">{text}</text>')
    step = max(1, math.ceil(len(xs) / 8))  # at most ~8 labels under the axis
    for x in xs[::step]:
        parts.append(f'<line x1="{px(x):.1f}" x2="{px(x):.1f}" y1="{TOP + plot_h}" y2="{TOP + plot_h + 4}" stroke="#999"/>'
                     f'<text x="{px(x):.1f}" y="{TOP + plot_h + 16}" text-anchor="middle">{_short(x)}</text>')
    axis = html.escape(curve.key) + (" (log scale)" if log else "")
    parts.append(f'<text x="{LEFT + plot_w / 2:.1f}" y="{HEIGHT - 8}" text-anchor="middle">{axis}</text>')
    parts.append(f'<text x="{LEFT}" y="{TOP - 9}" font-weight="bold">{html.escape(curve.diagnostic)}</text>')
    legend = []
    for i, (label, points) in enumerate(curve.lines.items()):
        colour = PALETTE[i % len(PALETTE)]
        upper = [f"{px(p.x):.1f},{py(p.mean + p.std):.1f}" for p in points]
        lower = [f"{px(p.x):.1f},{py(p.mean - p.std):.1f}" for p in reversed(points)]
        if any(p.std > 0 for p in points):
            parts.append(f'<polygon class="band" points="{" ".join(upper + lower)}" fill="{colour}" fill-opacity="0.18"/>')
        mean = " ".join(f"{px(p.x):.1f},{py(p.mean):.1f}" for p in points)
        parts.append(f'<polyline class="line" data-label="{html.escape(label)}" points="{mean}" fill="none" '
                     f'stroke="{colour}" stroke-width="1.8"/>')
        parts += [f'<circle cx="{px(p.x):.1f}" cy="{py(p.mean):.1f}" r="2.6" fill="{colour}">'
                  f'<title>{html.escape(label)} · {html.escape(curve.key)}={_short(p.x)}: {p.mean:.4g} ± {p.std:.2g} '
                  f'({p.n} seed{"s" if p.n != 1 else ""})</title></circle>' for p in points]
        y = TOP + 6 + 18 * i
        legend.append(f'<g class="legend"><rect x="{WIDTH + 6}" y="{y}" width="14" height="4" fill="{colour}"/>'
                      f'<text x="{WIDTH + 25}" y="{y + 6}">{html.escape(label)}</text></g>')
    title = f"{curve.diagnostic} against {curve.key}, one line per variant, mean ± std over seeds"
    return (f'<svg xmlns="http://www.w3.org/2000/svg" class="sweep-plot" data-diagnostic="{html.escape(curve.diagnostic)}" '
            f'data-key="{html.escape(curve.key)}" width="{WIDTH + _legend_width(curve)}" height="{HEIGHT}" font-size="11" '
            f'font-family="system-ui, sans-serif" role="img" aria-label="{html.escape(title)}">'
            f'<title>{html.escape(title)}</title>{"".join(parts + legend)}</svg>')


def _legend_width(curve: Curve) -> int:
    """Room for the longest label at the legend's 11 px (a wide sans-serif glyph is under 7 px):
    "multi_head_attention (encoder.1)" was cut at LEGEND_W."""
    return max(LEGEND_W, 30 + 7 * max((len(label) for label in curve.lines), default=0))


def tick_texts(ticks: Sequence[float]) -> list[str]:
    """The ticks at three significant digits, or as many more as tell them apart: a narrow range
    (a loss 10.7921 to 10.7925) read "10.8" at every tick."""
    for digits in range(3, 10):
        texts = [f"{t + 0.0:.{digits}g}" for t in ticks]
        if len(set(texts)) == len(texts):
            return texts
    return texts


def _ticks(lo: float, hi: float, count: int = 5) -> list[float]:
    """Round values between lo and hi, about `count` of them."""
    raw = (hi - lo) / count
    magnitude = 10 ** math.floor(math.log10(raw))
    step = next(m * magnitude for m in (1, 2, 2.5, 5, 10) if m * magnitude >= raw)
    first = math.ceil(lo / step) * step
    return [first + i * step for i in range(int((hi - first) / step) + 1)]


def plots_html(report: Report, diagnostics: Sequence[str] = DEFAULT_DIAGNOSTICS) -> str:
    """The report's "sweeps as curves" section: a figure per (swept numeric key, diagnostic);
    empty when the sweep swept no numeric key."""
    curves, missing = sweep_curves(report, diagnostics)
    if not curves:
        return ""
    sections = ["<h2>Sweeps as curves (mean ± std over seeds)</h2>"]
    for key in dict.fromkeys(c.key for c in curves):
        figures = "".join(f"<figure>{curve_svg(c)}</figure>" for c in curves if c.key == key)
        sections.append(f'<h3>against {html.escape(key)}</h3><div class="cards">{figures}</div>')
    if missing:
        sections.append(f'<p class="note">not in these records: {html.escape(", ".join(missing))}</p>')
    return "".join(sections)


__all__ = ["DEFAULT_DIAGNOSTICS", "Curve", "Point", "chosen_diagnostics", "curve_svg", "line_labels", "log_axis",
           "numeric_swept_keys", "plots_html", "record_values", "sweep_curves"]
