"""The numbers in the heatmaps' cells, read back off the screen of every viewer as a user reads
them, equal the record's: TensorBoard's Images at its default card size, the run's report, the
sweep's comparison page, an executed notebook's HTML, and MLflow's UI where it is installed.

One small sweep serves them all: the book's inputs with the scaling left out and with the softmax
over the wrong axis, whose difference maps print minus signs and every digit 0-9. Each viewer's
page is screenshot in headless Chromium 1600 px wide; each heatmap is found on it at the size it
is shown, and its cells read by tesseract (tests/_heatmap_ocr.py). Expected: each cell's value
from the record (a difference map's: variant - reference), rounded as the cell's text is written
(its decimals or its e-notation). No cell may read as another number; a cell tesseract reads nothing from is allowed only if such
cells are at most UNREAD_ALLOWED of a page's."""

from __future__ import annotations

import importlib.util
import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

import attnlab
from attnlab.record import read_record
from attnlab.sinks.html import REPORT_FILE
from tests._heatmap_ocr import TESSERACT, decimals_read, read_cells, reads_as, shown_maps
from tests.sinks.test_browser import BROWSER, screenshot, tensorboard, wait_for_json

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(BROWSER is None, reason="no Chromium installed (apt-get install chromium)"),
    pytest.mark.skipif(TESSERACT is None, reason="no tesseract to read the pictures (apt-get install tesseract-ocr)"),
]

VARIANTS = ("unscaled", "wrong_softmax_axis")
UNREAD_ALLOWED = 0.02  # tesseract may miss a cell's text; it must never read it as another number


def _record_values(record, tag: str) -> np.ndarray:
    """The matrix a heatmap tag draws, from the record: `heatmaps/<source>/<stage>[_log]` (a
    log view prints the values themselves)."""
    _, source, stage = tag.split("/")
    stage = stage.removesuffix("_log")
    variant, reference = record.variant.heads_view(stage), record.reference.heads_view(stage)
    return {"variant": variant, "reference": reference}.get(source, variant - reference)


@dataclass(frozen=True)
class Swept:
    folder: Path
    jobs: list[Path]  # in job order
    results: list[attnlab.Result]


@pytest.fixture(scope="module")
def sweep(tmp_path_factory) -> Swept:
    out = tmp_path_factory.mktemp("numbers") / "sweep"
    results = attnlab.sweep(variant=list(VARIANTS), out_dir=out, progress=False).results
    jobs = sorted((p for p in out.iterdir() if (p / "record.json").exists()), key=lambda p: int(p.name.split("-")[0]))
    return Swept(out, jobs, results)


def drawn(job_dirs: list[Path]) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """({name: pixels}, {name: the record's values}) of every heatmap the jobs drew with cell values."""
    images, values = {}, {}
    for job in job_dirs:
        record = read_record(job / "record.json")
        index = json.loads((job / "heatmaps" / "index.json").read_text())
        for entry in index["images"]:
            matrix = _record_values(record, entry["tag"])
            if max(matrix.shape) <= 6:  # the maps that print their cells
                name = f"{job.name}:{entry['tag']}"
                images[name] = np.asarray(Image.open(job / "heatmaps" / entry["file"]).convert("RGB"))
                values[name] = matrix
    return images, values


def read_back(screen: np.ndarray, job_dirs: list[Path], work: Path) -> tuple[set[str], list[str], int, int]:
    """(the maps found on screen, the cells read as another number, cells unread, cells in all)."""
    images, values = drawn(job_dirs)
    shown = shown_maps(screen, images)
    texts = read_cells([(s, values[s.name].shape) for s in shown], work)
    wrong, unread, cells = [], 0, 0
    for s, read in zip(shown, texts):
        top = float(np.abs(values[s.name]).max())
        decimals = decimals_read(read)
        assert top * 10 ** decimals >= 10, f"{s.name}: {decimals} decimals leave its largest value {top:.3g} one digit"
        for (i, j), value in np.ndenumerate(values[s.name]):
            cells += 1
            if not read[i][j]:
                unread += 1
            elif not reads_as(read[i][j], float(value)):
                wrong.append(f"{s.name} ({i}, {j}) reads {read[i][j]!r}, the record {float(value):.6g}")
    return {s.name for s in shown}, wrong, unread, cells


def check(found: set[str], wrong: list[str], unread: int, cells: int, expected: set[str]) -> None:
    assert expected <= found, f"not found on screen: {sorted(expected - found)}"
    assert not wrong, f"{len(wrong)} of {cells} cells misread:\n" + "\n".join(wrong)
    assert unread <= UNREAD_ALLOWED * cells, f"{unread} of {cells} cells unread"


def test_the_reports_numbers_read_as_the_record(sweep: Swept, tmp_path: Path) -> None:
    job = sweep.jobs[1]  # the wrong softmax axis: its difference maps' minus signs
    screen = screenshot((job / REPORT_FILE).as_uri(), tmp_path / "report.png", tmp_path / "profile", height=1500)
    images, _ = drawn([job])
    check(*read_back(screen, [job], tmp_path), expected=set(images))


def test_the_comparison_pages_numbers_read_as_the_record(sweep: Swept, tmp_path: Path) -> None:
    screen = screenshot((sweep.folder / "comparison.html").as_uri(), tmp_path / "comparison.png", tmp_path / "profile",
                        height=1400)
    expected = {f"{job.name}:heatmaps/difference/weights" for job in sweep.jobs}
    check(*read_back(screen, sweep.jobs, tmp_path), expected=expected)


def test_tensorboards_images_at_their_default_card_size_read_as_the_record(sweep: Swept, tmp_path: Path) -> None:
    """The legacy Images dashboard draws every card's image CARD_WIDTH across, pixelated (at 1,280
    and 1,600 px windows alike): the numbers must read there without "Show actual image size"."""
    with tensorboard(sweep.folder) as base:
        wait_for_json(f"{base}/data/plugin/images/tags")
        screen = screenshot(f"{base}/#images", tmp_path / "images.png", tmp_path / "profile", height=2000,
                            wait_ms=15000)
    expected = {f"{job.name}:heatmaps/difference/{stage}" for job in sweep.jobs for stage in ("weights", "context")}
    check(*read_back(screen, sweep.jobs, tmp_path), expected=expected)


def test_a_notebooks_numbers_read_as_the_record(sweep: Swept, tmp_path: Path) -> None:
    """The job's Result as a notebook cell's output: formatted by IPython's display formatter (what
    a kernel sends), in a notebook converted to HTML by nbconvert (as JupyterLab renders text/html:
    the page's own images; tests/examples/test_notebook.py runs the example notebook on a kernel)."""
    import nbformat
    from IPython.core.formatters import DisplayFormatter
    from nbconvert import HTMLExporter

    job = sweep.jobs[1]
    data, metadata = DisplayFormatter().format(sweep.results[1])
    cell = nbformat.v4.new_code_cell("attnlab.run('wrong_softmax_axis')", execution_count=1, outputs=[
        nbformat.v4.new_output("execute_result", data=data, metadata=metadata, execution_count=1)])
    page, _ = HTMLExporter().from_notebook_node(nbformat.v4.new_notebook(cells=[cell]))
    (tmp_path / "notebook.html").write_text(page)
    screen = screenshot((tmp_path / "notebook.html").as_uri(), tmp_path / "notebook.png", tmp_path / "profile",
                        height=2000)
    expected = {f"{job.name}:heatmaps/{source}/weights" for source in ("variant", "reference", "difference")}
    check(*read_back(screen, [job], tmp_path), expected=expected)


def test_mlflows_ui_numbers_read_as_the_record() -> None:
    if importlib.util.find_spec("mlflow") is None or importlib.util.find_spec("flask") is None:
        pytest.skip("MLflow's UI is not installed (attnlab[mlflow] is mlflow-skinny: a tracking client without "
                    "the server or its web pages)")
    pytest.skip("MLflow's UI is installed but not read yet: its artifact view loads images on click")
