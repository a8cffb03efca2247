"""Heatmap rendering: shapes, annotations, colour maps, pooling, PNG encoding."""

from __future__ import annotations

import io

import numpy as np
import pytest
from PIL import Image

from attnlab.drawing import glyphs
from attnlab.drawing.colours import DIVERGING_LUT, SEQUENTIAL_LUT
from attnlab.drawing.png import to_png_bytes
from attnlab.reporting import heatmap
from attnlab.reporting.heatmap import GRID_WIDTH, MAP_SIDE, render_head_grid, render_heatmap

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
    h, w = (bottom - top) / n, (right - left) / n  # cells are stretched to the grid: 1 px apart in size
    return image[top + int(i * h) + 2 : top + int((i + 1) * h) - 2,
                 left + int(j * w) + 2 : left + int((j + 1) * w) - 2].reshape(-1, 3)


def most_common(pixels: np.ndarray) -> tuple[int, ...]:
    colours, counts = np.unique(pixels, axis=0, return_counts=True)
    return tuple(int(c) for c in colours[counts.argmax()])


def render(values: np.ndarray, **kwargs) -> np.ndarray:
    return render_heatmap(values, title=kwargs.pop("title", "weights"), **kwargs)


def test_returns_rgb_uint8_image_larger_than_the_grid():
    image = render(np.random.default_rng(0).random((6, 6)), row_labels=TOKENS, col_labels=TOKENS)
    assert image.dtype == np.uint8 and image.ndim == 3 and image.shape[2] == 3
    assert image.shape[0] > 6 * 10 and image.shape[1] > 6 * 10


def test_cells_show_their_value_up_to_6_tokens():
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


def test_pooling_keeps_the_grid_at_its_side_and_a_single_peak():
    rng = np.random.default_rng(2)
    values = rng.random((600, 600)).astype(np.float32)
    values[0, 0], values[0, 1] = 0.0, 1.0
    box = grid_box(render(values), render(1 - values))
    assert box[2] - box[0] <= MAP_SIDE and box[3] - box[1] <= MAP_SIDE
    peak = np.zeros((1200, 1200), dtype=np.float32)
    peak[777, 333] = 1.0  # one cell among 1.44 million: a mean would make it invisible
    yellow = SEQUENTIAL_LUT[-1]
    assert (render(peak) == yellow).all(axis=2).sum() >= 1 + 1  # the peak's block and the bar's top


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


def drawn_strings(monkeypatch) -> list[tuple[str, bool]]:
    """Every string a render draws, with whether it reads upwards."""
    drawn: list[tuple[str, bool]] = []
    original = glyphs.draw_string

    def record(image, xy, text, **kwargs):
        drawn.append((text, kwargs.get("vertical", False)))
        return original(image, xy, text, **kwargs)

    monkeypatch.setattr(glyphs, "draw_string", record)
    return drawn


def test_every_map_is_one_size_whatever_its_matrix():
    """A card shows each image at one size: a 6-token map must not be a fifth of a pooled one
    (native widths ran from 215 to 3,940 px)."""
    rng = np.random.default_rng(6)
    shapes = {render(rng.random((6, 6)), row_labels=TOKENS, col_labels=TOKENS).shape,
              render(rng.random((6, 2)), row_labels=TOKENS, col_labels=["d0", "d1"]).shape,
              render(rng.random((17, 17))).shape, render(rng.random((600, 600))).shape,
              render(rng.random((300, 64))).shape}
    assert len(shapes) == 1
    height, width, _ = shapes.pop()
    assert MAP_SIDE < width < 2 * MAP_SIDE and MAP_SIDE < height < 2 * MAP_SIDE


def test_a_grid_of_heads_is_one_width_for_any_number_of_heads():
    rng = np.random.default_rng(7)
    widths = {render_head_grid(rng.random((n, 32, 32)), title="weights").shape[1] for n in (2, 4, 12, 16)}
    assert len(widths) == 1 and GRID_WIDTH < widths.pop() < GRID_WIDTH + 150
    twelve = render_head_grid(rng.random((12, 32, 32)), title="weights")
    assert twelve.shape[0] < twelve.shape[1]  # 4 x 3 tiles, not a 12-tile strip


def test_every_image_fits_tensorboards_card_with_its_widest_ticks():
    """TensorBoard's Images card draws an image CARD_WIDTH across, pixelated: a wider image loses
    rows and columns of pixels, and thin strokes with them (tests/sinks/test_browser_numbers.py)."""
    wide = np.array([[-12345.0, 0.0], [1.0, 2.0]])  # ticks "-1.23e+04" and "1.23e+04"
    images = [render_heatmap(wide, title="scores"), render_head_grid(np.stack([wide] * 12), title="scores")]
    assert all(image.shape[1] <= heatmap.CARD_WIDTH for image in images)
    for image in images:
        inked = np.flatnonzero((image != 255).any(axis=(0, 2)))
        assert inked[-1] < image.shape[1] - 2  # the widest tick ends inside the image: not cut


def test_a_shared_range_gives_one_value_one_colour():
    """Variant and reference drawn side by side: 0.2 must be the same colour in both."""
    board = checkerboard(4, 0.1, 0.2)
    wide = checkerboard(4, 0.0, 0.2)
    box = grid_box(render(board, value_range=(0.0, 1.0)), render(1 - board, value_range=(0.0, 1.0)))
    first, second = render(board, value_range=(0.0, 0.2)), render(wide, value_range=(0.0, 0.2))
    assert most_common(cell(first, box, 4, 0, 1)) == most_common(cell(second, box, 4, 0, 1))  # both 0.2
    own = render(board)  # its own range, 0.1 to 0.2: 0.1 would be the bottom colour, not the shared scale's
    assert most_common(cell(own, box, 4, 0, 0)) != most_common(cell(first, box, 4, 0, 0))


def test_an_all_zero_difference_has_one_tick_and_no_negative_zero(monkeypatch):
    drawn = drawn_strings(monkeypatch)
    render(np.zeros((4, 4)), diverging=True, value_range=(-0.0, 0.0))
    texts = [text for text, _ in drawn]
    assert "all 0" in texts and not any(text.startswith("-0") for text in texts)


def test_column_labels_read_one_way_in_every_map(monkeypatch):
    """Head 0 rotated and head 1 horizontal was the text run's grid."""
    drawn = drawn_strings(monkeypatch)
    labels = ["a", "journey", "startsandstarts", "b"]
    render(np.random.default_rng(8).random((4, 4)), row_labels=labels, col_labels=labels)
    render(np.random.default_rng(9).random((4, 4)) * 1e-6, row_labels=labels, col_labels=labels)
    columns = [(text, vertical) for text, vertical in drawn if text in ("a", "journey", "startsan..", "b")]
    assert len(columns) == 16 and [vertical for _, vertical in columns].count(True) == 8


TRICKY_TEXTS = ["Your", "journey", "0.123", "-4.56e-07", "all 0", "head 11", "weights · reference · head 1",
                "Ünïcødé ☃", "two\nlines", "", " ", "..", "g|jQ"]


def _pillow_text(image: Image.Image, xy, text: str, size: int, anchor: str, colour, vertical: bool) -> None:
    """Text as Pillow draws it, each call afresh: ImageDraw.text; vertical, on a mask of its own,
    turned and pasted (Pillow turns text only with libraqm)."""
    from PIL import ImageDraw

    font = glyphs.font(size)
    if not vertical:
        ImageDraw.Draw(image).text(xy, text, fill=colour, font=font, anchor=anchor)
        return
    ascent, descent = font.getmetrics()
    mask = Image.new("L", (max(round(font.getlength(text)), 1), ascent + descent), 0)
    ImageDraw.Draw(mask).text((0, ascent), text, fill=255, font=font, anchor="ls")
    mask = mask.transpose(Image.Transpose.ROTATE_90)
    x = xy[0] - {"l": 0, "m": mask.width // 2, "r": mask.width}[anchor[0]]
    y = xy[1] - {"t": 0, "m": mask.height // 2, "b": mask.height}[anchor[1]]
    image.paste(colour, (x, y, x + mask.width, y + mask.height), mask)


@pytest.mark.parametrize("vertical", [False, True])
def test_text_drawn_through_remembered_masks_is_pillows_own_every_time(vertical):
    """The same pixels as Pillow's drawing, on a busy background, at every anchor, near and over
    the image's edges, over text already there, and again once the masks are remembered."""
    rng = np.random.default_rng(5)
    background = rng.integers(0, 256, (60, 90, 3), dtype=np.uint8)
    ours, pillows = Image.fromarray(background), Image.fromarray(background)
    for round_ in range(2):
        for i, text in enumerate(TRICKY_TEXTS):
            for anchor in ("lt", "rm", "mb", "mm", "lb", "rt") + (() if vertical else ("la", "ms")):
                xy = (int(rng.integers(-10, 100)), int(rng.integers(-10, 70)))
                colour = tuple(int(c) for c in rng.integers(0, 256, 3))
                size = (11, 13)[(i + round_) % 2]
                try:
                    _pillow_text(pillows, xy, text, size, anchor, colour, vertical)
                except ValueError:  # e.g. a vertical anchor for text of several lines: ours refuses it too
                    with pytest.raises(ValueError):
                        glyphs.draw_string(ours, xy, text, size=size, anchor=anchor, colour=colour, vertical=vertical)
                    continue
                glyphs.draw_string(ours, xy, text, size=size, anchor=anchor, colour=colour, vertical=vertical)
        np.testing.assert_array_equal(np.asarray(ours), np.asarray(pillows))
    assert not np.array_equal(np.asarray(ours), background)


def test_a_value_wider_than_its_cell_is_still_drawn():
    """6x6 weights lost every value when one was too wide for its cell: 0.000123 at
    three digits is; it is shortened, and every cell still carries text."""
    values = np.full((6, 6), 0.2, np.float32)
    values[2, 3] = 0.000123
    base = render(values, value_range=(0.0, 1.0))
    box = grid_box(base, render(values + 0.5, value_range=(0.0, 1.0)))
    for i in range(6):
        for j in range(6):
            assert len(np.unique(cell(base, box, 6, i, j), axis=0)) > 2, f"cell ({i}, {j}) has no value"


def test_a_long_title_is_fitted_inside_the_image():
    """Crop titles were cut at the image's edge: the title band's last columns stay white."""
    title = "weights · difference · head 11 · batch item 0 · crop of the first divergent block at full resolution"
    image = render(np.random.default_rng(0).random((300, 300)), title=title,
                   region="rows 128-191 x cols 64-127 of 1024x1024, full resolution")
    band = image[: heatmap._title_band(), -heatmap._MARGIN:]
    assert (band == 255).all()


def test_zero_grey_marks_masked_cells_and_leaves_the_others_coloured():
    causal = np.tril(np.full((8, 8), 0.25, np.float32))
    image = render(causal, value_range=(0.0, 1.0), zero_grey=True)
    box = grid_box(image, render(causal * 2, value_range=(0.0, 1.0), zero_grey=True))
    assert most_common(cell(image, box, 8, 0, 7)) == (160, 160, 160)  # above the diagonal: masked
    assert most_common(cell(image, box, 8, 7, 0)) != (160, 160, 160)


def test_a_log_scale_tells_small_weights_apart_where_a_linear_one_does_not():
    """At 1,024 tokens a causal row's weights are ~1/i: on 0 to 1 they are one dark colour."""
    rows = np.arange(1, 65, dtype=np.float32)[:, None]
    weights = np.tril(np.ones((64, 64), np.float32)) / rows  # (T, T) uniform over the visible keys
    linear = render(weights[16:], value_range=(0.0, 1.0), zero_grey=True)
    log = render(weights[16:], value_range=(-4.0, 0.0), scale="log", zero_grey=True)
    top, left = heatmap._title_band() + heatmap._LABEL_BAND, heatmap._MARGIN + heatmap._LABEL_BAND

    def first_column(image: np.ndarray) -> np.ndarray:  # key 0, seen by every query
        return image[top:top + MAP_SIDE, left + 1]

    assert len(np.unique(first_column(log), axis=0)) > 2 * len(np.unique(first_column(linear), axis=0))


def test_a_score_sized_stage_is_scaled_on_percentiles_not_one_extreme():
    from attnlab.reporting.job_heatmaps import stage_scale

    scores = np.random.default_rng(0).normal(size=(64, 64)).astype(np.float32)
    scores[0, 0] = 1e4  # one extreme score
    low, high = stage_scale("scores", scores).value_range
    assert high < 10 and low > -10  # the percentiles of the others
    assert np.isclose(high, np.percentile(scores, 99.5)) and np.isclose(low, np.percentile(scores, 0.5))


def test_every_cell_of_a_map_has_one_number_format(monkeypatch):
    """"3e-03" beside "0.003" in one map read as two kinds of number: one format for all cells."""
    centred: list[str] = []  # the cells' values: drawn centred in their cells, unlike labels and ticks
    original = glyphs.draw_string
    monkeypatch.setattr(glyphs, "draw_string", lambda image, xy, text, **kwargs: (
        centred.append(text) if kwargs.get("anchor") == "mm" else None, original(image, xy, text, **kwargs)))
    values = np.array([[0.0326, -0.0038, 0.0002], [0.021, -0.0001, 0.3], [1e-7, -0.015, 0.0]], np.float32)
    render(values, diverging=True)
    cells = set(centred)
    assert len(centred) == 9
    assert cells >= {"0.033", "-0.004", "0.300", "0.000"}  # the largest with three significant digits
    assert "-0.000" not in cells  # -0.0001 rounds to 0, without a sign
    assert len({len(text.lstrip("-").partition(".")[2]) for text in cells}) == 1, cells


def test_a_space_in_a_legend_is_as_wide_as_a_letter():
    """Pillow's own font drew a space one pixel wide: "log 1e-4to 1"."""
    assert glyphs.text_width("1e-4 to 1") - glyphs.text_width("1e-4to 1") >= glyphs.text_width("o") // 2
