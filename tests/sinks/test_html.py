"""attnlab.sinks.html: comparison.html is self-contained and reads only the records."""

from __future__ import annotations

import base64
import io
import re

import numpy as np
import pandas as pd
import pytest
from PIL import Image

import attnlab
from attnlab.record import Finding, Record, Side
from attnlab.reporting.aggregate import Report
from attnlab.sinks.html import profile_chart, render_html, render_record_html
from attnlab.sinks.html_images import card_pictures
from tests._sweep_helpers import Page, sweep_of_lengths


def record(variant: str = "unscaled", seed: int = 1, side: dict | None = None, **overrides) -> Record:
    """`side`: the variant's stages, shapes or diagnostics where not a 3 x 3 identity's."""
    stages = {"stages": {"weights": np.eye(3, dtype=np.float32)}, "shapes": {"weights": [3, 3]}}
    fields = dict(
        variant=Side(variant, **{**stages, "diagnostics": {"weights_entropy_mean": 0.0}, **(side or {})}),
        seed=seed, config={"inputs": {"kind": "book"}, "weights": "shared"},
        n_tokens=3, d_in=3, d_out=2, labels=["Your", "journey", "<b>"],
        findings=[Finding("scaling", "scaled_scores", "error", "divide the scores by sqrt(d_k) <before> softmax")],
    )
    return Record(**{**fields, **overrides})


def embedded_images(page: str) -> list[Image.Image]:
    return [Image.open(io.BytesIO(base64.b64decode(b))) for b in re.findall(r'src="data:image/png;base64,([^"]+)"', page)]


def test_page_is_self_contained_with_the_weights_and_their_log_view_per_configuration() -> None:
    page = render_html(Report([record(seed=1), record(seed=2), record("reference", findings=[])]))
    assert not re.search(r"(src|href)=\"(https?:)?//", page) and "<script" not in page
    images = embedded_images(page)
    assert len(images) == 4 and all(im.format == "PNG" and im.size[0] > 10 for im in images)
    assert "<style>" in page


def test_findings_are_in_words_escaped_and_name_their_seeds() -> None:
    page = render_html(Report([record(seed=1), record(seed=2)]))
    assert "divide the scores by sqrt(d_k) &lt;before&gt; softmax" in page
    assert "(seed 1, 2)" in page
    assert "<before>" not in page and "<b>" not in page


def test_reference_without_findings_says_so() -> None:
    assert "No findings" in render_html(Report([record("reference", findings=[])]))


def test_weights_without_values_or_pngs_say_how_to_get_a_picture() -> None:
    big = record(side={"stages": {"weights": None}, "shapes": {"weights": [4096, 4096]}})
    assert "log.images=true" in card_pictures(big) and "4096x4096" in card_pictures(big)


def test_failed_record_shows_its_error_and_no_image() -> None:
    failed = record("raises", status="failed", error="variant 'raises' raised RuntimeError: boom",
                    side={"stages": {}, "shapes": {}, "diagnostics": {}}, findings=[])
    page = render_html(Report([failed]))
    assert "failed: variant &#x27;raises&#x27; raised RuntimeError: boom" in page
    assert not embedded_images(page)


def test_odd_shaped_weights_are_drawn_without_labels() -> None:
    odd = record(side={"stages": {"weights": np.ones((2, 3, 3), dtype=np.float32)}, "shapes": {"weights": [2, 3, 3]}})
    assert "data:image/png;base64," in card_pictures(odd)


@pytest.mark.slow
def test_a_profiled_sweep_has_a_bar_per_variant_in_the_report(app, tmp_path):
    sweep = tmp_path / "sweep"
    run = app("-m", f"hydra.sweep.dir={sweep}", "variant=multi_head_attention,impl_sdpa", "profile=true",
              "profile_budget_s=0.05", "inputs=random", "inputs.n_tokens=16", "inputs.d_in=8", "d_out=8",
              "log.tensorboard=false")
    assert run.returncode == 0, run.stderr
    page = (sweep / "comparison.html").read_text()
    chart = page[page.index("What each variant costs"):]
    for label in ("forward ms", "peak MiB", "GFLOPs"):
        assert label in chart
    assert chart.count(">impl_sdpa</text>") == 3 and chart.count(">multi_head_attention</text>") == 3


def test_a_sweep_over_a_number_has_one_svg_per_curve_with_the_variants_in_its_legend(tmp_path) -> None:
    length_sweep = sweep_of_lengths(tmp_path)
    page = Page(render_html(length_sweep, plots=["weights_entropy_mean", "divergence_context_h*", "missing_one"]))
    assert [(p["diagnostic"], p["key"]) for p in page.plots] == [
        ("weights_entropy_mean", "n_tokens"), ("divergence_context_h0", "n_tokens"), ("divergence_context_h1", "n_tokens")]
    assert all(p["legend"] == ["alibi", "rope"] and p["lines"] == 2 for p in page.plots)
    assert "not in these records: missing_one" in render_html(length_sweep, plots=["missing_one", "weights_entropy_mean"])


def test_a_long_variant_name_is_not_cut_at_the_charts_left_edge() -> None:
    """The name column widens with the longest name (~7 px a character at 12 px), so an
    end-anchored label never starts left of the picture."""
    name = "impl_torch_mha_no_weights_and_more"
    jobs = pd.DataFrame({"variant": [name, "impl_sdpa"], "forward_ms": [3.0, 1.0]})
    svg = profile_chart(jobs)
    anchor = float(re.search(rf'<text x="([\d.]+)" y="\d+" text-anchor="end">{name}</text>', svg).group(1))
    assert anchor >= 7 * len(name)


def test_a_single_runs_table_marks_the_rows_where_the_variant_differs() -> None:
    page = render_record_html(attnlab.run("unscaled", 1, log={"tensorboard": False, "table": False, "html": False,
                                                              "terminal": False}).record)
    marked = re.findall(r'<tr class="differs"><td>([^<]+)</td>', page)
    assert "variant" in marked and "scale_observed" in marked  # unscaled against reference
    assert "d_in" not in marked and "seed" not in marked  # the same in both


def test_a_failed_run_does_not_say_no_stage_diverged() -> None:
    page = render_record_html(record(status="failed", error="boom", side={"stages": {}, "shapes": {}}, findings=[]))
    assert "first divergent stage: not reached (the run failed)" in page


def test_a_single_runs_page_says_what_the_run_did_other_than_asked_escaped() -> None:
    """The notes the terminal prints (a class run at a width or token count of its own) head the page too."""
    page = render_record_html(record(notes=["ran at d_in=128, not inputs.d_in=64: <q_proj> 128 wide"]))
    assert '<p class="note">note: ran at d_in=128, not inputs.d_in=64: &lt;q_proj&gt; 128 wide</p>' in page
    assert page.index("ran at d_in=128") < page.index("<h2>Findings</h2>")
    assert '<p class="note">note:' not in render_record_html(record())


def test_a_single_runs_page_says_which_predictions_failed_and_names_no_machine_path(tmp_path) -> None:
    """It said only "predictions — 1/2 passed", embedded the job's absolute folder, and headed the
    heatmaps "batch item shown: show.batch" (the key, not its value)."""
    run = attnlab.run("unscaled", 1, out_dir=str(tmp_path / "job"), overrides=[
        "expect.first_divergent_stage=weights", "expect.context_shape=[6,2]"],
        log={"tensorboard": False, "table": False, "terminal": False})
    page = (tmp_path / "job" / "report.html").read_text()
    assert "Predictions (1/2 passed)" in page
    assert "predict first_divergent_stage = weights: FAIL (observed scaled_scores)" in page
    assert "predict context_shape = [6, 2]: pass (observed [6, 2])" in page
    assert str(tmp_path) not in page
    assert "batch item shown: 0" in page and "show.batch" not in page
    assert run.record.ok
