"""The HTML pages as a reader meets them: a picture on every card at every size, images
at their native size, a single run's own page, the summary without rows of zeros, text left-aligned,
profile charts in one order with the reference."""

from __future__ import annotations

import base64
import io
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from PIL import Image

import attnlab
from attnlab.reporting.aggregate import Report, find_record_files, load_records
from attnlab.sinks.base import JobInfo
from attnlab.sinks.html import REPORT_FILE, STYLE, profile_chart, render_html, write_html_report
from attnlab.sinks.terminal import TerminalSink

ONLY_HTML = {"log": {"tensorboard": False, "table": False, "html": True}}


def images_of(page: str) -> list[tuple[Image.Image, int, int]]:
    """Every inlined PNG with the width and height its <img> asks for."""
    found = re.findall(r'<img [^>]*width="(\d+)" height="(\d+)" src="data:image/png;base64,([^"]+)"', page)
    return [(Image.open(io.BytesIO(base64.b64decode(data))), int(w), int(h)) for w, h, data in found]


def cards_of(page: str) -> list[str]:
    return re.findall(r'<div class="card">(.*?)</div>(?=<div class="card">|</div>)', page, flags=re.S)


@pytest.fixture(scope="module")
def big_sweep(tmp_path_factory) -> Report:
    """Two configurations at 300 tokens: weights of 90,000 values, above what record.json inlines."""
    folder = tmp_path_factory.mktemp("sweep")
    for num, variant in enumerate(("unscaled", "reference")):
        attnlab.run(variant, 1, out_dir=folder / f"{num}-{variant}", inputs="random", d_out=4,
                    overrides=["inputs.n_tokens=300", "inputs.d_in=4"], **ONLY_HTML)
    records, problems = load_records(find_record_files([folder]))
    assert not problems and all(r.variant.stages["weights"] is None for r in records)  # not inlined
    return Report(records)


def test_every_card_has_a_picture_when_the_record_holds_no_values(big_sweep: Report) -> None:
    page = render_html(big_sweep)
    cards = cards_of(page)
    assert len(cards) == 2
    assert all(images_of(card) for card in cards)
    assert "too large" not in page and "no picture" not in page


def test_images_are_shown_at_their_native_size(big_sweep: Report) -> None:
    page = render_html(big_sweep)
    images = images_of(page)
    assert images and all(image.size == (w, h) for image, w, h in images)
    assert "pixelated" not in STYLE and "max-width: 380px" not in STYLE


def test_a_single_run_writes_its_own_page_worded_for_one_record(tmp_path: Path, capsys) -> None:
    result = attnlab.run("unscaled", 1, out_dir=tmp_path, **ONLY_HTML)
    page = (tmp_path / REPORT_FILE).read_text()
    assert "over seeds" not in page and "record(s)" not in page
    assert "attnlab run: unscaled" in page and "scaling @ scaled_scores" in page
    assert len(images_of(page)) >= 3  # variant, reference and difference of the weights at least
    TerminalSink().write([result.record], JobInfo(tmp_path))
    assert capsys.readouterr().out.splitlines()[-1].startswith(f"report: {tmp_path / REPORT_FILE}")


def test_compare_of_one_record_is_the_single_run_page(tmp_path: Path) -> None:
    attnlab.run("unscaled", 1, out_dir=tmp_path / "run", **ONLY_HTML)
    records, _ = load_records(find_record_files([tmp_path / "run"]))
    page = write_html_report(Report(records), tmp_path / "x.html").read_text()
    assert "attnlab run: unscaled" in page and "mean ± std over seeds" not in page


def test_the_summary_leaves_out_rows_of_zeros_and_says_how_many(tmp_path: Path) -> None:
    for num, seed in enumerate((1, 2)):
        attnlab.run("unscaled", seed, out_dir=tmp_path / f"{num}", **ONLY_HTML)
    records, _ = load_records(find_record_files([tmp_path]))
    page = render_html(Report(records))
    summary = page[page.index("Summary (mean ± std over seeds)"):page.index("What differs between jobs")]
    assert "<td>0 ± 0</td>" not in summary and not re.search(r">0</td>", summary)
    hidden = int(re.search(r"(\d+) diagnostics that are 0 ± 0 in every configuration are not shown", summary).group(1))
    assert hidden > 0
    assert "divergence_context" in summary  # a diagnostic that is not zero stays


def test_text_is_left_aligned_and_numbers_right_aligned() -> None:
    assert re.search(r"th, td \{[^}]*text-align: left", STYLE) and re.search(r"td\.num \{[^}]*text-align: right", STYLE)
    page = render_html(Report([]))
    assert "text-align: right; white-space" not in page


def bars(svg_chart: str) -> list[list[str]]:
    """The names of each chart's bars, top to bottom."""
    figures = re.findall(r"<figure>(.*?)</figure>", svg_chart, flags=re.S)
    return [re.findall(r'text-anchor="end">([^<]+)</text>', figure) for figure in figures]


def test_profile_charts_share_one_order_lead_with_the_reference_and_use_a_log_axis_when_wide() -> None:
    jobs = pd.DataFrame({
        "variant": ["a_fast", "b_slow", "c_mid"], "forward_ms": [1.0, 35.0, 2.0], "forward_ms_vs_reference": [0.5, 17.5, 1.0],
        "peak_bytes": [3 * 2**20, 1 * 2**20, 2 * 2**20], "flops": [3e9, 2e9, 1e9],
    })
    chart = profile_chart(jobs)
    orders = bars(chart)
    assert orders[0] == ["(reference)", "a_fast", "b_slow", "c_mid"]  # its time: the variant's over the ratio
    assert all(order[-3:] == ["a_fast", "b_slow", "c_mid"] for order in orders)
    assert "forward ms (log scale)" in chart and "peak MiB (log scale)" not in chart
    widths = [float(w) for w in re.findall(r'<rect [^>]*width="([\d.]+)"', chart.split("</figure>")[0])]
    assert widths[2] / widths[1] < 35 / 1.0 / 4  # 35x on a log axis: not a squashed field of slivers
    assert re.search(r">2</text>", chart)  # the reference's forward ms: 1.0 / 0.5
    assert np.isclose(float(re.findall(r'<text x="[\d.]+" y="13">([\d.]+)</text>', chart)[0]), 2.0)


def test_an_n_seeds_jobs_card_shows_the_pngs_its_job_kept(tmp_path: Path) -> None:
    attnlab.run("unscaled", 1, n_seeds=2, out_dir=tmp_path / "job", inputs="random", d_out=4,
                overrides=["inputs.n_tokens=300", "inputs.d_in=4"], **ONLY_HTML)
    records, _ = load_records(find_record_files([tmp_path / "job"]))
    assert len(records) == 2 and all(r.variant.stages["weights"] is None for r in records)
    (card,) = cards_of(render_html(Report(records)))
    assert images_of(card)


def test_with_log_images_off_a_card_still_has_its_picture(tmp_path: Path) -> None:
    """The presets that switch images off (mha_implementations, long_context) had cards saying the
    weights were too large to inline: the job keeps the card's pictures, the weights and their log
    view."""
    log = {"tensorboard": False, "table": False, "html": True, "images": False}
    for variant in ("unscaled", "reference"):
        attnlab.run(variant, 1, out_dir=tmp_path / variant, inputs="random", d_out=4,
                    overrides=["inputs.n_tokens=300", "inputs.d_in=4"], log=log)
        assert sorted(p.name for p in (tmp_path / variant / "heatmaps").rglob("*.png")) == ["weights.png", "weights_log.png"]
    records, _ = load_records(find_record_files([tmp_path]))
    cards = cards_of(render_html(Report(records)))
    assert len(cards) == 2 and all(images_of(card) for card in cards)


def test_a_single_runs_page_leads_with_the_first_divergent_stage(tmp_path: Path) -> None:
    """`head_merge @ output`: the output's maps come first, before the weights that match."""
    attnlab.run("mha_head_merge", 1, out_dir=tmp_path / "run", log={"tensorboard": False, "table": False, "html": True})
    page = (tmp_path / "run" / "report.html").read_text()
    stages = re.findall(r"<h3>([a-z_]+)</h3>", page)
    assert stages[0] == "output" and "weights" in stages
    assert {f"heatmaps/{s}/output" for s in ("variant", "reference", "difference")} <= set(
        re.findall(r'<img alt="([^"]+)"', page))


@pytest.mark.slow
def test_a_sweeps_page_says_how_it_was_started_what_it_swept_and_links_each_jobs_page(tmp_path: Path, capsys) -> None:
    from attnlab.app.cli import main as cli_main

    sweep = tmp_path / "sweep"
    code = cli_main(["-m", "variant=reference,unscaled", "d_out=2,4", "log.terminal=false", "log.tensorboard=false",
                     f"hydra.sweep.dir={sweep}"])
    assert code == 0, capsys.readouterr().err
    page = (sweep / "comparison.html").read_text()
    header = re.search(r'<dl class="header">(.*?)</dl>', page, flags=re.S).group(1)
    fields = dict(re.findall(r"<dt>(.*?)</dt><dd>(.*?)</dd>", header, flags=re.S))
    assert fields["command"] == (f"<code>python -m attnlab -m variant=reference,unscaled d_out=2,4 log.terminal=false "
                                 f"log.tensorboard=false hydra.sweep.dir={sweep}</code>")
    assert fields["swept"] == "variant: reference, unscaled · d_out: 2, 4"
    assert fields["reference"] == "reference" and str(sweep) in fields["folder"]
    links = re.findall(r'<a href="([^"]+)">([^<]+)</a>', fields["jobs"])
    assert [label for _, label in links] == ["reference d_out=2 s123", "reference d_out=4 s123",
                                             "unscaled d_out=2 s123", "unscaled d_out=4 s123"]
    from urllib.parse import unquote

    for href, label in links:
        target = sweep / unquote(href)
        assert target.name == REPORT_FILE and target.exists(), href
        assert label.split()[0] in target.read_text()  # the job's own page
