"""examples/notebook.ipynb executed with nbclient on a kernel of this test's venv; its cells assert
what they show (scaling, head_merge, the edited plugin, KL by hand, one-line typo). The executed
notebook, converted to HTML by nbconvert, is then opened in headless Chromium where one is
installed: the displayed Results' heatmaps are on screen at their own size, at 6 tokens and at
1,024 tokens x 12 heads, and the long one's weights show their structure."""

from __future__ import annotations

import numpy as np
import pytest

from tests.examples.notebook_kernel import NOTEBOOK, execute, shown_text
from tests.sinks.test_browser import BROWSER, found_at_native_size, head_tile, page_images, screenshot


def test_the_example_notebook_is_committed_executed():
    """Every code cell of the committed notebook was run, in order, and what they show is there (the README calls it executed)."""
    import nbformat

    cells = [c for c in nbformat.read(NOTEBOOK, as_version=4).cells if c.cell_type == "code"]
    assert [c.execution_count for c in cells] == list(range(1, len(cells) + 1))
    assert sum(bool(c.outputs) for c in cells) == len(cells) - 1  # all but the imports' cell show something


def _displayed(notebook, source: str) -> dict:
    """The execute_result of the code cell whose source is `source`'s last line."""
    cell = next(c for c in notebook.cells if c.cell_type == "code" and c.source.splitlines()[-1] == source)
    return next(out for out in cell.outputs if out["output_type"] == "execute_result")["data"]


@pytest.mark.slow
def test_the_example_notebook_runs_and_its_pictures_show_in_a_browser(tmp_path, monkeypatch):
    import nbformat

    monkeypatch.setenv("JUPYTER_PATH", str(tmp_path))
    committed = nbformat.read(NOTEBOOK, as_version=4)
    notebook = execute(nbformat.read(NOTEBOOK, as_version=4), tmp_path)
    assert shown_text(notebook) == shown_text(committed), "examples/notebook.ipynb is stale: python -m tests.examples.notebook_kernel"
    text = "\n".join(out.get("text", "") for cell in notebook.cells for out in cell.get("outputs", []))
    assert "scaling@scaled_scores" in text and "head_merge@output" in text
    assert "unknown variant 'unscald'; did you mean 'unscaled'?" in text
    short, long_context = _displayed(notebook, "from_class"), _displayed(notebook, "long_context")
    assert "Result(variant='notebook:SelfAttention_v1'" in short["text/plain"]
    assert "<img" in short.get("text/html", "") and "<img" in long_context.get("text/html", "")
    if BROWSER is None:
        pytest.skip("the notebook ran; no Chromium installed to look at it (apt-get install chromium)")

    from nbconvert import HTMLExporter

    page, _ = HTMLExporter().from_notebook_node(notebook)
    (tmp_path / "notebook.html").write_text(page)
    screen = screenshot((tmp_path / "notebook.html").as_uri(), tmp_path / "notebook.png", tmp_path / "profile",
                        height=14000)
    six = page_images(short["text/html"])["heatmaps/variant/weights"]
    grid = page_images(long_context["text/html"])["heatmaps/variant/weights_log"]
    assert found_at_native_size(six, screen) and found_at_native_size(grid, screen)
    assert len(np.unique(six.reshape(-1, 3), axis=0)) > 6  # the 6 x 6 cells are not one colour
    tile = head_tile(grid, 12).astype(int)
    rows = range(tile.shape[0] * 100 // 1024, tile.shape[0] * 1000 // 1024)  # rows 100-1000 of 1024 queries
    below = np.concatenate([tile[r, : max(1, r - 1)] for r in rows])
    assert len(np.unique(below, axis=0)) > 10 and below.std() > 5  # not one colour: the weights' structure
