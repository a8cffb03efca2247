"""A Result's notebook view: findings in words, the shape trace, the maps of the first
divergent stage and of the weights, self-contained."""

from __future__ import annotations

import base64
import io
import re
from dataclasses import replace

import numpy as np
from PIL import Image

import attnlab
from attnlab.sinks.inline_html import results_html

NO_SINKS = {"log": {"tensorboard": False, "table": False, "html": False, "terminal": False}}


def alts(page: str) -> list[str]:
    return re.findall(r'<img alt="([^"]+)"', page)


def test_the_inline_view_names_the_finding_and_draws_its_stage_and_the_weights() -> None:
    result = attnlab.run("unscaled", 1, **NO_SINKS)
    page = result._repr_html_()
    assert "scaling @ scaled_scores" in page and "shapes: inputs (6, 3)" in page
    assert {f"heatmaps/{source}/{stage}" for source in ("variant", "reference", "difference")
            for stage in ("scaled_scores", "weights")} <= set(alts(page))
    assert "heatmaps/variant/context" not in alts(page)  # only what the view is about
    assert not re.search(r"(src|href)=\"(https?:)?//", page) and "<script" not in page
    for data in re.findall(r'src="data:image/png;base64,([^"]+)"', page):
        assert Image.open(io.BytesIO(base64.b64decode(data))).format == "PNG"


def test_a_variant_equal_to_the_reference_shows_the_weights_and_says_no_divergence() -> None:
    result = attnlab.run("reference", 1, **NO_SINKS)
    page = result._repr_html_()
    assert "first divergent stage: none" in page
    assert set(alts(page)) == {"heatmaps/variant/weights", "heatmaps/reference/weights", "heatmaps/variant/weights_log"}


def test_the_token_labels_of_the_text_are_on_the_maps() -> None:
    """The book's six words label the 6x6 map: the drawn map differs from one drawn with other labels."""
    result = attnlab.run("unscaled", 1, **NO_SINKS)
    assert result.record.labels == ["Your", "journey", "starts", "with", "one", "step"]
    page = result._repr_html_()
    data = re.search(r'alt="heatmaps/variant/weights" [^>]*src="data:image/png;base64,([^"]+)"', page)[1]
    shown = np.asarray(Image.open(io.BytesIO(base64.b64decode(data))).convert("RGB"))
    result.record = replace(result.record, labels=["a", "b", "c", "d", "e", "f"])
    other = re.search(r'alt="heatmaps/variant/weights" [^>]*src="data:image/png;base64,([^"]+)"', result._repr_html_())[1]
    assert not np.array_equal(shown, np.asarray(Image.open(io.BytesIO(base64.b64decode(other))).convert("RGB")))


def test_several_results_are_one_section_each() -> None:
    records = [attnlab.run(v, 1, **NO_SINKS).record for v in ("unscaled", "reference")]
    page = results_html(records)
    assert page.count("<b>unscaled</b>") == 1 and page.count("<b>reference</b>") == 1
