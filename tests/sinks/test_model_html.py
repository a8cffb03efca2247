"""A model run's report: the per-layer table the terminal prints and the replaced
layer's variant / reference / difference at its first divergent stage; the same in the notebook view."""

from __future__ import annotations

import re

import pytest

import attnlab
from attnlab.drawing import glyphs
from attnlab.sinks.inline_html import results_html
from attnlab.sinks.model_html import render_model_html


@pytest.fixture(scope="module")
def layers():
    """The source's head-merge mistake in both layers of a tiny GPT-2 built from its config."""
    return [r.record for r in attnlab.run("mha_head_merge", 1, overrides=[
        "model=hf:gpt2", "model.n_layer=2", "model.n_embd=64", "model.n_head=4", "layer=all", "inputs=text"],
        log={"tensorboard": False, "table": False, "html": False, "terminal": False})]


@pytest.mark.parametrize("render", [render_model_html, results_html], ids=["report", "inline"])
def test_a_model_run_shows_its_layer_table_and_the_replaced_layers_maps(layers, render) -> None:
    page = render(layers)
    header = re.search(r"<thead><tr>(.*?)</tr></thead>", page)[1]
    assert re.findall(r"<th>(.*?)</th>", header)[:3] == ["layer", "status", "first divergent"]
    body = re.search(r"<tbody>(.*?)</tbody>", page)[1]
    assert [re.findall(r"<td>(.*?)</td>", row)[:3] for row in re.findall(r"<tr[^>]*>(.*?)</tr>", body)] == [
        ["0", "ok", "output"], ["1", "ok", "output"]]
    alts = re.findall(r'<img alt="([^"]+)"', page)
    for source in ("variant", "reference", "difference"):
        assert alts.count(f"heatmaps/{source}/output") == 2  # each layer's replaced layer at its first divergent stage
    assert alts.count("heatmaps/variant/weights") == 2  # and its attention weights, the picture a learner looks for


def test_the_models_own_weights_are_on_the_weights_scale_0_to_1(layers, monkeypatch) -> None:
    """They were scaled from their smallest weight ("linear 1.89e-26 to 1"), unlike every other weights map."""
    from attnlab.reporting import job_heatmaps
    from attnlab.reporting.job_heatmaps import _EncodedCache
    from attnlab.sinks.model_html import head_grid_html

    drawn: list[str] = []
    original = glyphs.draw_string
    monkeypatch.setattr(glyphs, "draw_string", lambda image, xy, text, **kw: (drawn.append(text), original(image, xy, text, **kw)))
    monkeypatch.setattr(job_heatmaps, "_ENCODED", _EncodedCache(budget=0))
    head_grid_html(layers[0])
    legends = [text for text in drawn if text.startswith("linear ")]
    assert len(legends) == 2 and all(text.startswith("linear 0 to 1 ") for text in legends), legends
