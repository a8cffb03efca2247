"""Heatmap rendering: shapes, annotations, colour maps, pooling, PNG encoding."""

from __future__ import annotations

import io
import zlib

import numpy as np
import pytest
from PIL import Image

from attnlab.reporting import heatmap
from attnlab.reporting.heatmap import (
    CROP,
    DIVERGING_LUT,
    MAX_SIDE,
    SEQUENTIAL_LUT,
    EncodedHeatmap,
    _EncodedCache,
    encoded_heatmap_views,
    render_heatmap,
    render_heatmap_views,
    to_png_bytes,
)

TOKENS = ["Your", "journey", "starts", "with", "one", "step"]
WHITE = (255, 255, 255)


def checkerboard(n: int, low: float = 0.0, high: float = 1.0) -> np.ndarray:
    board = np.indices((n, n)).sum(axis=0) % 2
    return np.where(board == 1, high, low).astype(np.float32)


def grid_box(first: np.ndarray, second: np.ndarray) -> tuple[int, int, int, int]:
    """(top, left, bottom, right) of the pixels that differ between two renders whose only
    difference is every cell's colour: that is the grid, found without knowing the layout."""
    ys, xs = np.nonzero((first != second).any(axis=2))
    return ys.min(), xs.min(), ys.max() + 1, xs.max() + 1


def cell(image: np.ndarray, box: tuple[int, int, int, int], n: int, i: int, j: int) -> np.ndarray:
    top, left, bottom, right = box
    h, w = (bottom - top) // n, (right - left) // n
    return image[top + i * h : top + (i + 1) * h, left + j * w : left + (j + 1) * w].reshape(-1, 3)


def most_common(pixels: np.ndarray) -> tuple[int, ...]:
    colours, counts = np.unique(pixels, axis=0, return_counts=True)
    return tuple(int(c) for c in colours[counts.argmax()])


def render(values: np.ndarray, **kwargs) -> np.ndarray:
    return render_heatmap(values, title=kwargs.pop("title", "weights"), **kwargs)


def test_returns_rgb_uint8_image_larger_than_the_grid():
    image = render(np.random.default_rng(0).random((6, 6)), row_labels=TOKENS, col_labels=TOKENS)
    assert image.dtype == np.uint8 and image.ndim == 3 and image.shape[2] == 3
    assert image.shape[0] > 6 * 10 and image.shape[1] > 6 * 10


def test_cells_show_their_value_up_to_16_tokens():
    board = checkerboard(6)
    first, second = render(board, row_labels=TOKENS, col_labels=TOKENS), render(1 - board, row_labels=TOKENS,
                                                                                   col_labels=TOKENS)
    box = grid_box(first, second)
    yellow = tuple(int(c) for c in SEQUENTIAL_LUT[-1])
    pixels = cell(first, box, 6, 0, 1)  # value 1: yellow, with "1" written on it
    assert most_common(pixels) == yellow
    assert (pixels != yellow).any(axis=1).sum() > 5  # the digit's ink


def test_cells_are_plain_above_16_tokens():
    board = checkerboard(17)
    first, second = render(board), render(1 - board)
    box = grid_box(first, second)
    pixels = cell(first, box, 17, 0, 1)
    assert len(np.unique(pixels, axis=0)) == 1


def test_token_labels_are_drawn():
    values = np.random.default_rng(1).random((6, 6))
    short = render(values, row_labels=list("abcdef"), col_labels=list("abcdef"))
    tokens = render(values, row_labels=TOKENS, col_labels=TOKENS)
    assert short.shape != tokens.shape or (short != tokens).any()


def test_diverging_map_is_white_at_zero():
    assert tuple(DIVERGING_LUT[len(DIVERGING_LUT) // 2]) == WHITE
    signs = np.array([[1.0, -1.0], [-1.0, 1.0]])
    box = grid_box(render(signs, diverging=True), render(-signs, diverging=True))
    image = render(np.array([[3.0, -1.0], [0.0, 0.0]]), diverging=True)  # range +-3 around 0
    assert most_common(cell(image, box, 2, 1, 0)) == WHITE
    assert most_common(cell(image, box, 2, 0, 0)) == tuple(int(c) for c in DIVERGING_LUT[-1])
    negative = most_common(cell(image, box, 2, 0, 1))
    assert negative[2] > negative[0]  # blue side, a third of the way: not white, not the end


def test_colour_bar_runs_from_max_at_top_to_min_at_bottom():
    board = checkerboard(4)
    image = render(board)
    _, _, _, right = grid_box(image, render(1 - board))
    beside = image[:, right:]
    top_ys = np.nonzero((beside == SEQUENTIAL_LUT[-1]).all(axis=2))[0]
    bottom_ys = np.nonzero((beside == SEQUENTIAL_LUT[0]).all(axis=2))[0]
    assert top_ys.size and bottom_ys.size and top_ys.max() < bottom_ys.min()


def test_min_max_ticks_follow_the_values():
    board = checkerboard(20)  # no cell text: only the ticks can change
    assert (render(board) != render(board * 2)).any()


def test_non_finite_cells_are_grey_and_do_not_stretch_the_range():
    image = render(np.array([[np.nan, 1.0], [0.0, np.inf]]))
    box = grid_box(image, render(np.array([[np.nan, 0.0], [1.0, np.inf]])))
    grey = (160, 160, 160)
    assert most_common(cell(image, box, 2, 0, 0)) == most_common(cell(image, box, 2, 1, 1)) == grey
    assert most_common(cell(image, box, 2, 0, 1)) == tuple(int(c) for c in SEQUENTIAL_LUT[-1])
    assert most_common(cell(image, box, 2, 1, 0)) == tuple(int(c) for c in SEQUENTIAL_LUT[0])


def test_pooling_keeps_at_most_512_cells_and_a_single_peak():
    rng = np.random.default_rng(2)
    values = rng.random((600, 600)).astype(np.float32)
    values[0, 0], values[0, 1] = 0.0, 1.0
    box = grid_box(render(values), render(1 - values))
    assert box[2] - box[0] <= MAX_SIDE and box[3] - box[1] <= MAX_SIDE
    peak = np.zeros((1200, 1200), dtype=np.float32)
    peak[777, 333] = 1.0  # one cell among 1.44 million: a mean would make it invisible
    yellow = SEQUENTIAL_LUT[-1]
    assert (render(peak) == yellow).all(axis=2).sum() >= 1 + 1  # the peak's block and the bar's top


def test_views_add_a_full_resolution_crop_above_512_tokens():
    small = render_heatmap_views(np.zeros((6, 6)), title="w", row_labels=TOKENS, col_labels=TOKENS)
    assert list(small) == ["main"]
    labels = [f"t{i}" for i in range(600)]
    big = render_heatmap_views(np.random.default_rng(3).random((600, 600)), title="w", row_labels=labels,
                               col_labels=labels, diverging=True)
    assert list(big) == ["main", "crop64"]
    crop = big["crop64"]
    assert crop.shape[0] >= CROP and crop.shape[1] >= CROP


def test_context_and_batched_inputs_are_drawn_as_matrices():
    assert render(np.ones((6, 2)), row_labels=TOKENS, col_labels=["d0", "d1"]).ndim == 3
    assert render(np.arange(5.0)).ndim == 3
    assert render(np.ones((2, 3, 6, 6))).ndim == 3


def test_label_count_must_match():
    with pytest.raises(ValueError, match="labels"):
        render(np.ones((6, 6)), row_labels=TOKENS[:3])


def test_png_bytes_decode_to_the_same_image():
    image = render(np.random.default_rng(4).random((6, 6)), row_labels=TOKENS, col_labels=TOKENS)
    decoded = np.asarray(Image.open(io.BytesIO(to_png_bytes(image))))
    assert np.array_equal(decoded, image)


def test_a_large_png_deflated_in_bands_decodes_to_the_same_image(monkeypatch):
    """Above PARALLEL_DEFLATE_BYTES the IDAT stream is compressed in bands on every core: still one
    zlib stream (header, concatenated deflate, adler32 of the whole) that Pillow and zlib read."""
    monkeypatch.setattr(heatmap.os, "cpu_count", lambda: 4)  # four bands whatever this machine has
    image = render(np.random.default_rng(5).random((900, 900)))
    image = np.tile(image, (3, 3, 1))  # several MB of raw rows, so more than one band
    assert image.nbytes > 2 * heatmap.PARALLEL_DEFLATE_BYTES
    decoded = np.asarray(Image.open(io.BytesIO(to_png_bytes(image))))
    assert np.array_equal(decoded, image)
    data = image.tobytes()
    assert zlib.decompress(heatmap._deflate(data)) == data


def test_encoded_views_are_the_png_of_the_rendered_views_hit_or_miss():
    weights = np.random.default_rng(11).random((6, 6)).astype(np.float32)
    expected = to_png_bytes(render_heatmap_views(weights, title="weights (reference)", row_labels=TOKENS,
                                                 col_labels=TOKENS)["main"])
    for _ in range(2):  # the first call draws, the second is served from the cache
        encoded = encoded_heatmap_views(weights.copy(), title="weights (reference)", row_labels=TOKENS, col_labels=TOKENS)
        assert encoded["main"].png == expected
        assert Image.open(io.BytesIO(encoded["main"].png)).size == (encoded["main"].width, encoded["main"].height)


def test_a_changed_value_title_or_label_is_a_new_image():
    weights = np.random.default_rng(12).random((6, 6)).astype(np.float32)
    first = encoded_heatmap_views(weights, title="weights (variant)")["main"].png
    changed = weights.copy()
    changed[5, 5] += 0.5
    assert encoded_heatmap_views(changed, title="weights (variant)")["main"].png != first
    assert encoded_heatmap_views(weights, title="weights (reference)")["main"].png != first
    assert encoded_heatmap_views(weights, title="weights (variant)", row_labels=TOKENS)["main"].png != first


def test_the_cache_drops_the_least_recently_used_past_its_byte_budget():
    cache = _EncodedCache(budget=250)
    entry = {"main": EncodedHeatmap(b"x" * 100, 1, 1)}
    for key in (b"a", b"b"):
        cache.put(key, entry)
    assert cache.get(b"a") is entry  # now b is the least recently used
    cache.put(b"c", entry)
    assert cache.get(b"b") is None and cache.get(b"a") is entry and cache.get(b"c") is entry
    assert cache.size == 200


def test_a_large_matrix_is_drawn_without_the_cache():
    from attnlab.reporting.heatmap import _ENCODED, CACHED_MAX_ELEMENTS

    side = int(CACHED_MAX_ELEMENTS**0.5) + 1
    before = len(_ENCODED.entries)
    big = np.random.default_rng(13).random((side, side)).astype(np.float32)
    encoded = encoded_heatmap_views(big, title="weights")
    assert encoded["main"].png == to_png_bytes(render_heatmap_views(big, title="weights")["main"])
    assert len(_ENCODED.entries) == before
