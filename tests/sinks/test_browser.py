"""The pages in a real headless browser: the HTML report's images are on screen pixel for
pixel (not downscaled), and TensorBoard's pages render. Skipped where no Chromium is installed
(`apt-get install chromium`)."""

from __future__ import annotations

import base64
import io
import json
import re
import shutil
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

import attnlab
from attnlab.sinks.html import REPORT_FILE

pytestmark = pytest.mark.slow

BROWSER = next((shutil.which(name) for name in ("chromium", "chromium-browser", "google-chrome") if shutil.which(name)), None)
needs_browser = pytest.mark.skipif(BROWSER is None, reason="no Chromium installed (apt-get install chromium)")


def screenshot(url: str, out: Path, profile: Path, *, height: int = 1200, wait_ms: int = 0) -> np.ndarray:
    """A 1600-wide screenshot of `url` at one device pixel per CSS pixel."""
    command = [BROWSER, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
               "--no-first-run", f"--user-data-dir={profile}", "--hide-scrollbars", "--force-device-scale-factor=1",
               f"--window-size=1600,{height}", f"--screenshot={out}", url]
    if wait_ms:
        command.insert(-1, f"--virtual-time-budget={wait_ms}")  # let a script-driven page fetch and draw
    subprocess.run(command, capture_output=True, timeout=180, check=True)
    return np.asarray(Image.open(out).convert("RGB"))


def found_at_native_size(image: np.ndarray, screen: np.ndarray) -> bool:
    """Is `image` on `screen` pixel for pixel somewhere?"""
    return where_at_native_size(image, screen) is not None


def where_at_native_size(image: np.ndarray, screen: np.ndarray) -> tuple[int, int] | None:
    """(top, left) where `image` is on `screen` pixel for pixel, if it is: its most colourful row locates candidates."""
    row = max(range(image.shape[0]), key=lambda y: len(np.unique(image[y], axis=0)))
    needle = image[row].tobytes()
    height, width = image.shape[:2]
    for y in range(screen.shape[0]):
        line = screen[y].tobytes()
        at = line.find(needle)
        while at != -1:
            if at % 3 == 0:
                top, left = y - row, at // 3
                block = screen[top:top + height, left:left + width]
                if top >= 0 and block.shape == image.shape and np.array_equal(block, image):
                    return top, left
            at = line.find(needle, at + 1)
    return None


@needs_browser
def test_the_single_run_report_shows_its_images_pixel_for_pixel(tmp_path: Path) -> None:
    attnlab.run("gqa", 1, num_heads=4, num_kv_heads=2, d_out=16, inputs="random", overrides=["inputs.n_tokens=16"],
                out_dir=tmp_path / "run", log={"tensorboard": False, "table": False, "html": True})
    page = (tmp_path / "run" / REPORT_FILE).read_text()
    images = [np.asarray(Image.open(io.BytesIO(base64.b64decode(data))).convert("RGB"))
              for data in re.findall(r'src="data:image/png;base64,([^"]+)"', page)]
    assert len(images) >= 3
    screen = screenshot((tmp_path / "run" / REPORT_FILE).as_uri(), tmp_path / "report.png", tmp_path / "profile",
                        height=2400)
    assert all(found_at_native_size(image, screen) for image in images[:3])  # the first row of pictures


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def tensorboard(logdir: Path) -> Iterator[str]:
    """A real TensorBoard server on `logdir` (127.0.0.1, a free port) for the block: its address."""
    port = free_port()
    server = subprocess.Popen([sys.executable, "-m", "tensorboard.main", "--logdir", str(logdir), "--host", "127.0.0.1",
                               "--port", str(port), "--load_fast", "false"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.terminate()
        server.wait(timeout=20)


@needs_browser
def test_tensorboard_opens_on_the_sweeps_curves_and_draws_its_pages(app, tmp_path: Path) -> None:
    sweep = tmp_path / "sweep"
    result = app("-m", f"hydra.sweep.dir={sweep}", "variant=gqa", "num_heads=4", "num_kv_heads=4,2",
                 "inputs=random", "inputs.n_tokens=16", "d_out=16", "seed=1,2", "log.terminal=false", "log.html=false")
    assert result.returncode == 0, result.stderr
    with tensorboard(sweep) as base:
        layout = wait_for_json(f"{base}/data/plugin/custom_scalars/layout")
        assert [c["title"] for c in layout["category"]] == ["sweep: against num_kv_heads"]  # no step-0 categories
        for page in ("custom_scalars", "images", "hparams"):
            screen = screenshot(f"{base}/#{page}", tmp_path / f"{page}.png", tmp_path / "profile", wait_ms=15000)
            assert screen.shape[:2] == (1200, 1600)
            assert len(np.unique(screen.reshape(-1, 3), axis=0)) > 50, f"#{page} drew next to nothing"


def heatmap_pixels(screen: np.ndarray) -> int:
    """Pixels of the difference maps' blue and red right of TensorBoard's run list and below its bar
    (its orange is neither: too much green)."""
    r, g, b = (screen[150:, 360:, i].astype(int) for i in range(3))
    return int(((b - r > 60) & (b - g > 30)).sum() + ((r - g > 80) & (r - b > 40) & (g < 100)).sum())


@needs_browser
def test_tensorboard_on_runs_with_an_81_job_sweep_opens_on_its_images(app, tmp_path: Path) -> None:
    """TensorBoard selects no run at all when a logdir has more than 40: an 81-job sweep under
    `runs` must still open with its heatmaps on screen."""
    runs = tmp_path / "runs"
    result = app("-m", f"hydra.sweep.dir={runs}/multirun/2026-12-06/10-00-00", "variant=reference,unscaled,wrong_softmax_axis",
                 "seed=1,2,3", "d_out=2,4,8", "inputs=random", "inputs.n_tokens=4,5,6", "log.terminal=false",
                 "log.html=false", "log.histograms=false")
    assert result.returncode == 0, result.stderr
    assert len(list(runs.rglob("record.json"))) == 81
    with tensorboard(runs) as base:
        names = wait_for_json(f"{base}/data/runs")
        assert 3 <= len(names) <= 40, names
        screen = screenshot(f"{base}/#images", tmp_path / "images.png", tmp_path / "profile", wait_ms=20000)
        assert heatmap_pixels(screen) > 20000, "the Images tab opened without the sweep's heatmaps"


def wait_for_json(url: str, timeout_s: float = 90) -> object:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(url, timeout=5) as response:
                data = json.loads(response.read())
            if data:
                return data
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            pass
        time.sleep(0.5)
    raise AssertionError(f"TensorBoard served nothing at {url}")


def page_images(page: str) -> dict[str, np.ndarray]:
    """{alt: pixels} of every embedded PNG (the report's alt is the image's tag)."""
    return {alt: np.asarray(Image.open(io.BytesIO(base64.b64decode(data))).convert("RGB"))
            for alt, data in re.findall(r'<img alt="([^"]+)"[^>]*src="data:image/png;base64,([^"]+)"', page)}


def head_tile(grid: np.ndarray, n_heads: int) -> np.ndarray:
    """Head 0's tile of a grid of all heads, found where render_head_grid puts it."""
    from attnlab.drawing import glyphs
    from attnlab.reporting import heatmap

    columns = int(np.ceil(np.sqrt(n_heads)))
    tile = (heatmap.GRID_WIDTH - heatmap._TILE_GAP * (columns - 1)) // columns
    top = heatmap._title_band() + glyphs.font(glyphs.TEXT_SIZE).getmetrics()[0] + 4
    return grid[top:top + tile, heatmap._MARGIN:heatmap._MARGIN + tile]


@needs_browser
def test_a_book_size_report_shows_every_weight_in_its_cell(tmp_path: Path) -> None:
    attnlab.run("unscaled", 1, out_dir=tmp_path / "run", log={"tensorboard": False, "table": False, "html": True})
    page = (tmp_path / "run" / REPORT_FILE).read_text()
    images = page_images(page)
    weights = images["heatmaps/variant/weights"]
    screen = screenshot((tmp_path / "run" / REPORT_FILE).as_uri(), tmp_path / "book.png", tmp_path / "profile",
                        height=2400)
    assert found_at_native_size(weights, screen)
    # the 6x6 grid: every cell carries its value, so each cell has text pixels beside its colour
    from attnlab.reporting import heatmap

    x0, y0 = heatmap._MARGIN + heatmap._LABEL_BAND, heatmap._title_band() + heatmap._LABEL_BAND
    side = heatmap.MAP_SIDE // 6
    for i in range(6):
        for j in range(6):
            cell = weights[y0 + i * side + 2:y0 + (i + 1) * side - 2, x0 + j * side + 2:x0 + (j + 1) * side - 2]
            assert len(np.unique(cell.reshape(-1, 3), axis=0)) > 3, f"cell ({i}, {j}) carries no value"


@needs_browser
def test_a_causal_1024_token_12_head_report_shows_structure_below_the_diagonal(tmp_path: Path) -> None:
    attnlab.run("impl_mha", 1, d_out=96, num_heads=12, inputs="random", reference="multi_head_attention",
                out_dir=tmp_path / "run", log={"tensorboard": False, "table": False, "html": True},
                overrides=["inputs.n_tokens=1024", "inputs.d_in=32", "inputs.distribution=normal",
                           "weights_init=normal", "batch=1"])
    page = (tmp_path / "run" / REPORT_FILE).read_text()
    images = page_images(page)
    grid = images["heatmaps/variant/weights_log"]
    screen = screenshot((tmp_path / "run" / REPORT_FILE).as_uri(), tmp_path / "long.png", tmp_path / "profile",
                        height=1600)
    assert found_at_native_size(grid, screen)
    tile = head_tile(grid, 12).astype(int)
    side = tile.shape[0]
    rows = range(side * 100 // 1024, side * 1000 // 1024)  # rows 100-1000 of the 1024 queries
    below = np.concatenate([tile[r, : max(1, r - 1)] for r in rows])  # left of the diagonal
    above = np.concatenate([tile[r, r + 2:] for r in rows if r + 2 < side])
    assert len(np.unique(below, axis=0)) > 10 and below.std() > 5  # not one colour: the weights' structure
    assert (above == 160).all()  # the masked keys are grey: the causal triangle is visible
    linear = head_tile(images["heatmaps/variant/weights"], 12)
    assert not np.array_equal(linear[side // 2, 1], linear[side // 2, -2])  # the linear map's triangle too


@needs_browser
def test_a_results_inline_view_at_1024_tokens_shows_the_weights_structure(tmp_path: Path) -> None:
    """The notebook's view (Result._repr_html_) of a causal 12-head run, in a page as Jupyter shows it."""
    result = attnlab.run("impl_mha", 1, d_out=96, num_heads=12, inputs="random", reference="multi_head_attention",
                         log={"tensorboard": False, "table": False, "html": False, "terminal": False},
                         overrides=["inputs.n_tokens=1024", "inputs.d_in=32", "inputs.distribution=normal",
                                    "weights_init=normal", "batch=1"])
    view = result._repr_html_()
    (tmp_path / "cell.html").write_text(f"<!DOCTYPE html><html><body>{view}</body></html>")
    grid = page_images(view)["heatmaps/variant/weights_log"]
    screen = screenshot((tmp_path / "cell.html").as_uri(), tmp_path / "cell.png", tmp_path / "profile")
    assert found_at_native_size(grid, screen)
    tile = head_tile(grid, 12).astype(int)
    rows = range(tile.shape[0] * 100 // 1024, tile.shape[0] * 1000 // 1024)
    below = np.concatenate([tile[r, : max(1, r - 1)] for r in rows])
    assert len(np.unique(below, axis=0)) > 10 and below.std() > 5


SEGFAULTING_PLUGIN = '''
import ctypes
import torch.nn as nn


class Segfaults(nn.Module):
    """Dies as FlexAttention died on one user's CPU: the job's process ends with SIGSEGV."""

    def __init__(self, d_in, d_out, num_heads):
        super().__init__()

    def forward(self, x):
        ctypes.string_at(0)
'''


def causal_structure(tile: np.ndarray, n_tokens: int) -> tuple[np.ndarray, np.ndarray]:
    """(the cells left of the diagonal, the cells right of it) of a map's queries 10% to 98% down,
    a pixel at each cell's centre (a pooled map: each pixel)."""
    cells = min(n_tokens, tile.shape[0])
    centre = [int((i + 0.5) * tile.shape[0] / cells) for i in range(cells)]
    rows = range(cells // 10, cells * 98 // 100)
    below = np.array([tile[centre[i], centre[j]] for i in rows for j in range(max(1, i - 1))])
    above = np.array([tile[centre[i], centre[j]] for i in rows for j in range(i + 2, cells)])
    return below, above


@needs_browser
@pytest.mark.parametrize("n_tokens", [6, 256, 1024])
def test_a_sweep_with_a_dead_job_shows_the_weights_structure_at_every_size(app, tmp_path: Path, n_tokens: int) -> None:
    """A causal 12-head sweep beside a job that dies of SIGSEGV: the comparison page and TensorBoard
    show the weights' causal triangle (masked keys grey, the rest not one colour) at every size, and
    the dead job adds no swept key (no curve, no size in the header)."""
    (tmp_path / "plugins").mkdir()
    (tmp_path / "plugins" / "segfaults.py").write_text(SEGFAULTING_PLUGIN)
    sweep = tmp_path / "runs" / "multirun" / "sweep"
    result = app("-m", f"hydra.sweep.dir={sweep}", "variant=impl_mha,segfaults", "reference=multi_head_attention",
                 "num_heads=12", "d_out=96", "inputs=random", f"inputs.n_tokens={n_tokens}", "inputs.d_in=32",
                 "inputs.distribution=normal", "weights_init=normal", "batch=1", "log.terminal=false",
                 "log.histograms=false")
    assert result.returncode == 1, result.stderr  # the dead job's record failed; the other is ok
    page = (sweep / "comparison.html").read_text()
    assert re.search(r"swept\s*variant: impl_mha, segfaults\s*reference", re.sub(r"<[^>]+>", "", page))
    assert "<svg" not in page  # no curve: nothing numeric looks swept
    grid = page_images(page)["variant attention weights of impl_mha (log scale)"]
    screen = screenshot((sweep / "comparison.html").as_uri(), tmp_path / "comparison.png", tmp_path / "profile",
                        height=2400)
    assert found_at_native_size(grid, screen)
    below, above = causal_structure(head_tile(grid, 12).astype(int), n_tokens)
    assert len(np.unique(below, axis=0)) > 3 and (above == 160).all()

    with tensorboard(tmp_path / "runs") as base:
        wait_for_json(f"{base}/data/runs")
        images = f"{base}/data/plugin/images"
        (served,) = wait_for_json(f"{images}/images?run=multirun/sweep/impl_mha&tag=heatmaps/variant/weights_log&sample=0")
        with urllib.request.urlopen(f"{images}/individualImage?{served['query']}", timeout=10) as r:
            image = np.asarray(Image.open(io.BytesIO(r.read())).convert("RGB"))
        below, above = causal_structure(head_tile(image, 12).astype(int), n_tokens)
        assert len(np.unique(below, axis=0)) > 3 and (above == 160).all()
        screen = screenshot(f"{base}/#images", tmp_path / "images.png", tmp_path / "profile", wait_ms=20000)
        assert len(np.unique(screen[150:, 360:].reshape(-1, 3), axis=0)) > 200, "the Images tab drew no heatmap"
