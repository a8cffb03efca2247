"""attnlab.reporting.sweep_plots: a sweep's diagnostics as curves against its numeric keys (the sinks' own
parts are in test_html.py and test_tensorboard.py); the presets long_context, kv_heads and
positions run through the real CLI at a reduced size, their comparison.html and TensorBoard runs
read back."""

from __future__ import annotations

import base64
import io
import math
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from attnlab.reporting.aggregate import Report
from attnlab.reporting.sweep_plots import chosen_diagnostics, curve_svg, log_axis, plots_html, sweep_curves
from attnlab.sinks.tensorboard import SWEEP_RUN, sweep_steps
from tests._sweep_helpers import Page, layout_of, report_of, sweep_events, sweep_of_lengths, sweep_record


@pytest.fixture
def length_sweep(tmp_path: Path) -> Report:
    return sweep_of_lengths(tmp_path)


def test_one_curve_per_diagnostic_and_numeric_key_with_mean_and_std_over_seeds(length_sweep: Report) -> None:
    curves, missing = sweep_curves(length_sweep, ["weights_entropy_mean", "divergence_context", "no_such_thing"])
    assert missing == ["no_such_thing"]
    assert [(c.diagnostic, c.key) for c in curves] == [("weights_entropy_mean", "n_tokens"), ("divergence_context", "n_tokens")]
    entropy = curves[0]
    assert list(entropy.lines) == ["alibi", "rope"] and entropy.xs == [4, 16, 64] and entropy.integer_steps
    point = entropy.lines["rope"][1]
    assert (point.x, point.n) == (16, 2)
    assert point.mean == pytest.approx(math.log(16) + 1.15)
    assert point.std == pytest.approx(float(np.std([0.1, 0.2], ddof=1)))


def test_per_head_values_are_plotted_by_glob_one_plot_per_head(length_sweep: Report) -> None:
    curves, _ = sweep_curves(length_sweep, ["divergence_context_h*"])
    assert [c.diagnostic for c in curves] == ["divergence_context_h0", "divergence_context_h1"]
    assert curves[1].lines["alibi"][0].mean == pytest.approx(1.5)  # seeds 1 and 2: heads [0, seed]


def test_chosen_diagnostics_keep_the_order_asked_and_sort_heads_naturally() -> None:
    available = ["a_h10", "a_h2", "b", "c"]
    assert chosen_diagnostics(["c", "a_h*", "x"], available) == (["c", "a_h2", "a_h10"], ["x"])


def test_failed_jobs_are_left_out_and_a_seed_alone_has_no_band(tmp_path: Path) -> None:
    report = report_of(tmp_path, [sweep_record("rope", 1, 4, entropy=1.0), sweep_record("rope", 2, 4, entropy=0.0, status="failed"),
                                  sweep_record("rope", 1, 8, entropy=2.0)])
    (curve,), _ = sweep_curves(report, ["weights_entropy_mean"])
    assert [(p.x, p.mean, p.std, p.n) for p in curve.lines["rope"]] == [(4, 1.0, 0.0, 1), (8, 2.0, 0.0, 1)]
    assert 'class="band"' not in curve_svg(curve)


def test_no_numeric_key_swept_means_no_plots(tmp_path: Path) -> None:
    report = report_of(tmp_path, [sweep_record(v, 1, 8, entropy=1.0) for v in ("alibi", "rope")])
    assert sweep_curves(report)[0] == [] and plots_html(report) == ""


def test_a_swept_variant_param_is_an_axis_and_its_fractional_values_are_indexed_steps(tmp_path: Path) -> None:
    report = report_of(tmp_path, [sweep_record("softcap", seed, 8, entropy=cap + seed, cap=cap)
                                  for cap in (0.5, 2.5) for seed in (1, 2)])
    (curve,), _ = sweep_curves(report, ["weights_entropy_mean"])
    assert curve.key == "variant.params.cap" and curve.xs == [0.5, 2.5] and not curve.integer_steps
    assert sweep_steps(curve) == {0.5: 0, 2.5: 1}


def test_log_axis_when_values_span_a_factor_of_16() -> None:
    assert log_axis([16, 64, 256, 1024, 4096]) and not log_axis([1, 2, 4, 8]) and not log_axis([0, 100])










# --- the presets, through the real CLI at a reduced size --------------------------------------

def run_preset(app, tmp_path: Path, name: str, *overrides: str) -> Path:
    folder = tmp_path / name
    run = app("-m", f"+experiment={name}", *overrides, f"hydra.sweep.dir={folder}")
    assert run.returncode == 0, run.stderr[-2000:]
    return folder


@pytest.mark.slow
def test_long_context_plots_entropy_row_max_and_first_token_mass_against_length(app, tmp_path: Path) -> None:
    folder = run_preset(app, tmp_path, "long_context", "inputs.n_tokens=8,16", "seed=1,2")
    variants = ["alibi", "multi_head_attention", "rope", "sliding_window", "softcap"]
    diagnostics = ["weights_entropy_mean", "weights_entropy_norm_mean", "weights_row_max_mean", "weights_first_token_mass"]
    page = Page((folder / "comparison.html").read_text())
    assert [(p["diagnostic"], p["key"]) for p in page.plots] == [(d, "n_tokens") for d in diagnostics]
    assert all(p["legend"] == variants for p in page.plots)
    runs = sweep_events(folder / SWEEP_RUN)
    assert sorted(runs) == variants
    for diagnostic in diagnostics:
        tag = f"Sweep/n_tokens/weights/{diagnostic.removeprefix('weights_')}/mean"
        assert [e.step for e in runs["rope"].Scalars(tag)] == [8, 16]
    charts = {chart.title.split(" ")[0] for chart in layout_of(runs["rope"]).category[0].chart}
    assert charts == {f"weights/{d.removeprefix('weights_')}" for d in diagnostics}


@pytest.mark.slow
def test_kv_heads_plots_each_heads_divergence_against_num_kv_heads(app, tmp_path: Path) -> None:
    folder = run_preset(app, tmp_path, "kv_heads", "num_heads=4", "num_kv_heads=4,2,1", "seed=1,2")
    page = Page((folder / "comparison.html").read_text())
    expected = ([f"divergence_context_h{h}" for h in range(4)] + [f"weights_entropy_mean_h{h}" for h in range(4)]
                + ["divergence_context"])
    assert [(p["diagnostic"], p["key"]) for p in page.plots] == [(d, "num_kv_heads") for d in expected]
    assert all(p["legend"] == ["gqa"] for p in page.plots)
    events = sweep_events(folder / SWEEP_RUN)["gqa"]
    assert [e.step for e in events.Scalars("Sweep/num_kv_heads/weights/entropy_mean_h1/mean")] == [1, 2, 4]
    # head 0 reads its own keys whatever the grouping: its entropy does not move with num_kv_heads
    head0 = [e.value for e in events.Scalars("Sweep/num_kv_heads/weights/entropy_mean_h0/mean")]
    assert max(head0) - min(head0) < 1e-6
    # against multi-head attention: head 1 shares head 0's keys from 2 kv heads down, head 2 only in MQA
    tag = "Sweep/num_kv_heads/{}/context_h{}/mean"
    divergence = {h: [e.value for e in events.Scalars(tag.format("divergence", h))] for h in range(4)}
    assert divergence[0] == [0.0, 0.0, 0.0] and divergence[1][2] == 0.0 and divergence[2][2] == 0.0
    assert min(divergence[1][:2]) > 0.1 and divergence[2][0] > 0.1 and divergence[2][1] == 0.0


@pytest.mark.slow
def test_positions_shows_each_variants_grid_of_heads(app, tmp_path: Path) -> None:
    folder = run_preset(app, tmp_path, "positions", "inputs.n_tokens=8")
    page = Page((folder / "comparison.html").read_text())
    assert page.plots == []  # nothing numeric was swept
    variants = [image for image in page.images if image["alt"].startswith("variant ")
                and not image["alt"].endswith("(log scale)")]
    assert [image["alt"] for image in variants] == [f"variant attention weights of {v}"
                                                     for v in ("alibi", "multi_head_attention", "rope")]
    for image in variants:
        grid = Image.open(io.BytesIO(base64.b64decode(image["src"].split(",", 1)[1])))
        assert grid.height < 1.2 * grid.width < 2 * grid.height  # the 4 heads in 2 x 2 tiles, not a strip


def test_ticks_of_a_narrow_range_are_told_apart() -> None:
    """A loss from 10.7921 to 10.7925 had every tick read "10.8"."""
    from attnlab.reporting.sweep_plots import _ticks, tick_texts

    texts = tick_texts(_ticks(10.7921, 10.7925))
    assert len(texts) >= 3 and len(set(texts)) == len(texts)
    assert tick_texts([0.0, 0.5, 1.0]) == ["0", "0.5", "1"]


def test_a_long_legend_label_fits_in_the_figure() -> None:
    """The model page's effect chart cut "multi_head_attention (encoder.1)" at a fixed legend width;
    measured here in DejaVu Sans at the chart's 11 px, the sans-serif a browser here draws it in."""
    import re

    from PIL import ImageFont

    from attnlab.reporting.sweep_plots import Curve, Point

    label = "multi_head_attention (encoder.1) against BartAttention"
    svg = curve_svg(Curve("KL mean", "layer", {label: [Point(0.0, 1.0, 0.0, 1), Point(1.0, 2.0, 0.0, 1)]}))
    width = float(re.search(r'<svg[^>]* width="([\d.]+)"', svg)[1])
    x = float(re.search(r'<g class="legend"><rect[^>]*/><text x="([\d.]+)"', svg)[1])
    font = ImageFont.truetype("/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf", 11) \
        if Path("/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf").exists() else pytest.skip("DejaVu Sans not installed")
    assert x + font.getlength(label) <= width
