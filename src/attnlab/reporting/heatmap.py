"""Heatmaps of attention matrices as uint8 RGB arrays, drawn with numpy and Pillow only.

Why not matplotlib: one figure per job tripled a sweep's run time. Here the cells are a colour
lookup (`lut[index]`) stretched to a fixed size, and Pillow draws only the text. The same images feed TensorBoard, MLflow and the HTML report
(attnlab.reporting.job_heatmaps decides which a job draws).

Rules a reader can rely on:
- one size per kind of image: a map's grid is MAP_SIDE pixels a side whatever its matrix, a
  grid of all heads GRID_WIDTH across however many heads, so a card never blows one up or
  shrinks another past reading; every image at most CARD_WIDTH across, the width TensorBoard's
  Images card draws an image at, pixelated: a wider one lost a row or column of pixels in 28
  there, and with it a 1-px stroke ("0.805" read "0.305", minus signs went);
- sequential map (viridis-like) for scores, weights, context; diverging map (blue-white-red)
  for differences, centred so that 0 is exactly white; the caller passes the scale shared by the
  maps shown side by side (variant and reference, every head) and says it in the legend (the
  third title line); `scale="log"` colours log10 of the values (a weight of 1e-3 is not black);
  `zero_grey`: cells exactly 0 are grey like non-finite ones (weights: a masked key);
- token labels on both axes when an axis has at most 16 entries (columns reading upwards, in
  every map), every cell's value when both have at most 6 (a value too wide for its cell at
  full precision is shortened, then drawn smaller); the axes' titles in the corner;
- non-finite cells are grey and never stretch the colour range;
- above MAX_SIDE entries an axis is pooled by block max (signed extreme for differences): a
  pooled map is for seeing *where* something happens. A NaN anywhere in a block makes it grey.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable
from functools import partial

import numpy as np
import torch
import torch.nn.functional as F
from PIL import Image

from attnlab.drawing import glyphs
from attnlab.drawing.colours import BACKGROUND, BLACK, DIVERGING_LUT, LUT_SIZE, NON_FINITE, SEQUENTIAL_LUT

CARD_WIDTH = 351  # px TensorBoard's Images card (2.x) draws an image across, enlarging a narrower one
MAP_SIDE = 192  # px of a map's grid, whatever the matrix's size: a whole map fits a ~350 px card
MAX_SIDE = MAP_SIDE  # cells per axis after pooling (a cell is at least a pixel)
GRID_WIDTH = 256  # px across the tiles of a grid of all heads, however many heads: as wide as a map
CROP = 64  # tokens in the full-resolution crop of a pooled map
ANNOTATE_MAX = 16  # axes up to this length get their labels
VALUES_MAX = 6  # axes up to this length get every cell's value (cells of 32 px and more)

_FONT_SIZE = glyphs.TEXT_SIZE
_TITLE_SIZE = 13
_MARGIN = 6
_LABEL_BAND = 74  # px beside and above the grid for labels (10 characters) and the axes' titles: one size
_BAR_W = 14
_TICK_W = 49  # px right of the colour bar for its ticks (the widest .3g tick, "-1.23e+04", is 51 of the 53 left for text)
_BAR_GAP = _MARGIN  # px between the grid and its colour bar
_TILE_GAP = 8
_SMALL_SIZE = 9  # a cell value too wide at _FONT_SIZE
_TITLE_LINES = 3  # title, what is drawn (shape, pooling, region), the colour scale

def _tensor(array: np.ndarray) -> torch.Tensor:
    """A float32 tensor on the array's own memory, read only here: a spilled stage is a read-only
    memory map, and torch's warning about writing to it does not apply."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="The given NumPy array is not writable")
        return torch.from_numpy(np.ascontiguousarray(array, dtype=np.float32))


def finite_range(*arrays: np.ndarray | None, diverging: bool = False) -> tuple[float, float]:
    """Finite min and max over every array (one colour scale for the variant and the reference,
    for every head); symmetric around 0 for a diverging map; (0, 0) when nothing is finite."""
    lows, highs = [], []
    for array in arrays:
        if array is None:
            continue
        values = _tensor(array).reshape(-1)
        if not values.numel():
            continue
        low, high = (float(v) for v in torch.aminmax(values))
        if not (math.isfinite(low) and math.isfinite(high)):  # a NaN or an infinity: the finite ones only
            finite = values[torch.isfinite(values)]
            if not finite.numel():
                continue
            low, high = (float(v) for v in torch.aminmax(finite))
        lows.append(low)
        highs.append(high)
    if not lows:
        return 0.0, 0.0
    low, high = min(lows), max(highs)
    if diverging:
        extent = max(abs(low), abs(high))
        return -extent, extent
    return low, high


def pool_heads(values: np.ndarray, cells: int, diverging: bool) -> tuple[np.ndarray, tuple[int, int]]:
    """(heads, rows, cols) pooled to at most `cells` per axis by block max (the signed extreme for
    a difference): a pooled map shows *where* something happens, and a mean would dilute one peaked
    row, a sink or one wrong cell into the background. NaN propagates: a grey block."""
    blocks = (-(-values.shape[1] // cells), -(-values.shape[2] // cells))
    if blocks == (1, 1):
        return values, blocks
    tensor = _tensor(values)[None]  # (1, heads, rows, cols)

    def pool(t: torch.Tensor) -> np.ndarray:
        return F.max_pool2d(t, kernel_size=blocks, stride=blocks, ceil_mode=True)[0].numpy()

    high = pool(tensor)
    if not diverging:
        return high, blocks
    low = -pool(-tensor)
    return np.where(np.abs(low) > np.abs(high), low, high), blocks


def _stretch(cells: np.ndarray, height: int, width: int) -> np.ndarray:
    """Nearest-neighbour (rows, cols, 3) to (height, width, 3): every map the same size on screen."""
    rows = np.arange(height) * cells.shape[0] // height
    cols = np.arange(width) * cells.shape[1] // width
    stretched: np.ndarray = cells.take(rows, axis=0).take(cols, axis=1)  # cells[rows][:, cols] without fancy indexing's overhead
    return stretched


def _colour(matrix: np.ndarray, low: float, high: float, lut: np.ndarray, zero_grey: bool = False) -> np.ndarray:
    """Map values to LUT colours; a constant scale takes the middle colour. Infinities are grey
    like NaN, not the ends of the scale: a learner must see them (and with `zero_grey`, zeros)."""
    span = high - low
    finite = np.isfinite(matrix)
    if zero_grey:
        finite &= matrix != 0
    if span > 0:
        with np.errstate(invalid="ignore", over="ignore"):
            t = (matrix - low) * np.float32((LUT_SIZE - 1) / span)
        np.clip(t, 0.0, LUT_SIZE - 1, out=t)
        t[~finite] = 0.0  # coloured below (a NaN through clip stays NaN)
        index = (t + 0.5).astype(np.uint16)  # rounds half up: t >= 0
    else:
        index = np.full(matrix.shape, (LUT_SIZE - 1) // 2, dtype=np.uint16)
    cells = lut[index]
    cells[~finite] = NON_FINITE
    return cells


def _as_heads(values: np.ndarray) -> np.ndarray:
    """(heads, rows, cols): a 1-d array is one row, a matrix one head; leading axes beyond three
    take their first item (callers pass one batch item)."""
    array = np.asarray(values, dtype=np.float32)
    if array.ndim == 0:
        raise ValueError("a heatmap needs at least one dimension")
    while array.ndim > 3:
        array = array[0]
    return array.reshape((1,) * (3 - array.ndim) + array.shape)


LOG_FLOOR = -4.0  # log10 of the smallest weight a log map tells apart: 1/1024 is -3
ROBUST_PERCENTILES = (0.5, 99.5)  # a score-sized stage's scale: one extreme score must not flatten the rest
_ROBUST_SAMPLE = 1 << 20  # values the percentiles are taken over (a strided sample of a larger stage)


def robust_range(*arrays: np.ndarray | None) -> tuple[float, float]:
    """ROBUST_PERCENTILES of the finite values of every array together (one scale for the variant
    and the reference); the finite range where that is a single value; (0, 0) when none is finite."""
    samples = []
    for array in arrays:
        if array is None or not np.size(array):
            continue
        flat = np.asarray(array, dtype=np.float32).reshape(-1)
        samples.append(flat[:: max(1, flat.size // _ROBUST_SAMPLE)])
    if not samples:
        return 0.0, 0.0
    values = np.concatenate(samples)
    values = values[np.isfinite(values)]
    if not values.size:
        return 0.0, 0.0
    low, high = (float(v) for v in np.percentile(values, ROBUST_PERCENTILES))
    return (low, high) if high > low else finite_range(*arrays)


def log_values(values: np.ndarray) -> np.ndarray:
    """log10 of non-negative values, 0 to -inf (grey in a map), without numpy's warning."""
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.log10(np.asarray(values, dtype=np.float32))


def render_heatmap(
    values: np.ndarray,
    *,
    title: str,
    row_labels: list[str] | None = None,
    col_labels: list[str] | None = None,
    diverging: bool = False,
    value_range: tuple[float, float] | None = None,
    scale: str = "linear",
    legend: str | None = None,
    zero_grey: bool = False,
    axes: tuple[str, str] | None = None,
    region: str | None = None,
    first_index: tuple[int, int] = (0, 0),
) -> np.ndarray:
    """One matrix as an (H, W, 3) uint8 heatmap of one fixed size: its grid is MAP_SIDE pixels a
    side whatever the matrix (pooled above MAX_SIDE cells), beside fixed bands for labels, a
    colour bar and a three-line title (the second: the matrix's shape and any pooling, or
    `region`; the third: `legend`, the colour scale in words).

    `value_range`: the colour scale's (min, max), shared with the maps it is shown beside (the
    reference, other heads), in log10 units for `scale="log"`; by default the matrix's own finite
    range. Labels: token labels up to ANNOTATE_MAX entries, rows left, columns reading upwards,
    the same way in every map; longer axes get their first and last index (counted from
    `first_index`, a crop's corner). Cell values up to VALUES_MAX entries. `axes`: the titles of
    the rows and the columns ("queries", "keys").
    """
    matrix = _as_heads(values)[0]
    rows = _axis_labels(row_labels, matrix.shape[0], "row")
    cols = _axis_labels(col_labels, matrix.shape[1], "column")
    shown = log_values(matrix) if scale == "log" else matrix
    low, high = value_range if value_range is not None else finite_range(shown, diverging=diverging)
    pooled, blocks = pool_heads(matrix[None], MAX_SIDE, diverging)  # block max commutes with log10
    lut = DIVERGING_LUT if diverging else SEQUENTIAL_LUT
    cells = _colour(log_values(pooled[0]) if scale == "log" else pooled[0], low, high, lut, zero_grey)
    note = region or _pooling_note(f"{matrix.shape[0]}x{matrix.shape[1]}", blocks, diverging)
    canvas, grid_x, grid_y = _canvas(MAP_SIDE, MAP_SIDE)
    canvas[grid_y:grid_y + MAP_SIDE, grid_x:grid_x + MAP_SIDE] = _stretch(cells, MAP_SIDE, MAP_SIDE)
    image = Image.fromarray(canvas, mode="RGB")
    _draw_titles(image, title, note, legend or _default_legend(low, high, scale))
    _draw_labels(image, grid_x, grid_y, rows, cols, matrix.shape, first_index)
    if axes is not None:
        _draw_axes(image, grid_x, grid_y, axes)
    if max(matrix.shape) <= VALUES_MAX:
        _draw_values(image, grid_x, grid_y, pooled[0], cells)
    finite_only = not np.isfinite(shown).all()  # grey cells are outside the bar: "all 0" would hide them
    return _with_bar(image, grid_x + MAP_SIDE, grid_y, MAP_SIDE, low, high, lut, diverging, scale, finite_only)


def render_head_grid(values: np.ndarray, *, title: str, diverging: bool = False,
                     value_range: tuple[float, float] | None = None, scale: str = "linear",
                     legend: str | None = None, zero_grey: bool = False,
                     axes: tuple[str, str] | None = None,
                     pooled: tuple[np.ndarray, tuple[int, int]] | None = None) -> np.ndarray:
    """Every head of a (heads, rows, cols) array in one image of GRID_WIDTH: tiles in a
    near-square grid (a 12-head strip in a card cannot be read), each captioned with its head,
    pooled to its tile, and one colour bar for all (the heads share one scale). `scale`,
    `legend`, `zero_grey` as in render_heatmap; `axes` are named in the second title line;
    `pooled`: grid_pooling(values, diverging) when the caller draws the same heads twice."""
    heads = _as_heads(values)
    n = heads.shape[0]
    columns = math.ceil(math.sqrt(n))
    tile = _grid_tile(n)
    caption = glyphs.font(_FONT_SIZE).getmetrics()[0] + 4
    n_rows = -(-n // columns)
    height = n_rows * (tile + caption) + (n_rows - 1) * _TILE_GAP
    if value_range is None:
        value_range = finite_range(log_values(heads) if scale == "log" else heads, diverging=diverging)
    low, high = value_range
    cells, blocks = pooled if pooled is not None else grid_pooling(heads, diverging)
    if scale == "log":
        cells = log_values(cells)
    lut = DIVERGING_LUT if diverging else SEQUENTIAL_LUT
    canvas, grid_x, grid_y = _canvas(GRID_WIDTH, height, label_band=False)
    for h in range(n):
        x = grid_x + (h % columns) * (tile + _TILE_GAP)
        y = grid_y + (h // columns) * (tile + caption + _TILE_GAP) + caption
        canvas[y:y + tile, x:x + tile] = _stretch(_colour(cells[h], low, high, lut, zero_grey), tile, tile)
    image = Image.fromarray(canvas, mode="RGB")
    shape = f"{n} heads of {heads.shape[1]}x{heads.shape[2]}" + (f" ({axes[0]} x {axes[1]})" if axes else "")
    _draw_titles(image, title, _pooling_note(shape, blocks, diverging), legend or _default_legend(low, high, scale))
    for h in range(n):
        x = grid_x + (h % columns) * (tile + _TILE_GAP)
        y = grid_y + (h // columns) * (tile + caption + _TILE_GAP)
        glyphs.draw_string(image, (x, y), f"head {h}")
    return _with_bar(image, grid_x + GRID_WIDTH, grid_y, height, low, high, lut, diverging, scale,
                     finite_only=not np.isfinite(cells).all())


def _grid_tile(n: int) -> int:
    columns = math.ceil(math.sqrt(n))
    return (GRID_WIDTH - _TILE_GAP * (columns - 1)) // columns


def grid_pooling(values: np.ndarray, diverging: bool = False) -> tuple[np.ndarray, tuple[int, int]]:
    """The heads pooled to the tiles of their grid (pool_heads), for render_head_grid's `pooled`."""
    heads = _as_heads(values)
    return pool_heads(heads, _grid_tile(heads.shape[0]), diverging)


def _pooling_note(shape: str, blocks: tuple[int, int], diverging: bool) -> str:
    if blocks == (1, 1):
        return shape
    return f"{shape}, block {'signed extreme' if diverging else 'max'} {blocks[0]}x{blocks[1]}"


def _default_legend(low: float, high: float, scale: str) -> str:
    return f"{'log' if scale == 'log' else 'linear'} {_tick(low, scale)} to {_tick(high, scale)}"


def _title_band() -> int:
    return glyphs.font(_TITLE_SIZE).getmetrics()[0] + 3 + (_TITLE_LINES - 1) * (glyphs.font(_FONT_SIZE).getmetrics()[0] + 3) + _MARGIN


def _canvas(grid_w: int, grid_h: int, label_band: bool = True) -> tuple[np.ndarray, int, int]:
    """A white canvas: title band, label bands (left and top), the grid, colour bar and ticks."""
    band = _LABEL_BAND if label_band else 0
    grid_x, grid_y = _MARGIN + band, _title_band() + band
    width = grid_x + grid_w + _BAR_GAP + _BAR_W + 4 + _TICK_W + _MARGIN
    height = grid_y + grid_h + _MARGIN + _FONT_SIZE
    return np.full((height, width, 3), BACKGROUND, dtype=np.uint8), grid_x, grid_y


def _fit(text: str, width: int, size: int) -> tuple[str, int]:
    """`text` at `size`, else at the small size, else cut with an ellipsis: never past `width` px."""
    for candidate in (size, _SMALL_SIZE):
        if glyphs.text_width(text, candidate) <= width:
            return text, candidate
    while len(text) > 1 and glyphs.text_width(text + "…", _SMALL_SIZE) > width:
        text = text[:-1]
    return text + "…", _SMALL_SIZE


def _draw_titles(image: Image.Image, title: str, note: str, legend: str) -> None:
    """Three lines, each fitted to the image's width: the title, what is drawn, the colour scale."""
    width = image.width - 2 * _MARGIN
    y = _MARGIN
    for text, size in ((title, _TITLE_SIZE), (note, _FONT_SIZE), (legend, _FONT_SIZE)):
        fitted, at = _fit(text, width, size)
        glyphs.draw_string(image, (_MARGIN, y), fitted, size=at)
        y += glyphs.font(size).getmetrics()[0] + 3


def _axis_labels(labels: list[str] | None, n: int, axis: str) -> list[str] | None:
    """Labels to draw on one axis, or None when the axis is too long to label."""
    if labels is not None and len(labels) != n:
        raise ValueError(f"{len(labels)} {axis} labels for {n} {axis}s")
    if n > ANNOTATE_MAX:
        return None
    return [_shorten(str(label)) for label in labels] if labels is not None else [str(i) for i in range(n)]


def _shorten(label: str, limit: int = 10) -> str:
    return label if len(label) <= limit else label[: limit - 2] + ".."


def _draw_labels(image: Image.Image, grid_x: int, grid_y: int, rows: list[str] | None, cols: list[str] | None,
                 shape: tuple[int, int], first_index: tuple[int, int] = (0, 0)) -> None:
    """Row labels right-aligned left of the grid, column labels reading upwards above it, each at
    its cell's centre; an axis too long to label gets its first and last index at its ends."""
    cell_h, cell_w = MAP_SIDE / shape[0], MAP_SIDE / shape[1]
    r0, c0 = first_index
    row_marks = list(enumerate(rows)) if rows is not None else [(0, str(r0)), (shape[0] - 1, str(r0 + shape[0] - 1))]
    col_marks = list(enumerate(cols)) if cols is not None else [(0, str(c0)), (shape[1] - 1, str(c0 + shape[1] - 1))]
    for i, label in row_marks:
        glyphs.draw_string(image, (grid_x - 4, grid_y + int((i + 0.5) * cell_h)), label, anchor="rm")
    for j, label in col_marks:
        glyphs.draw_string(image, (grid_x + int((j + 0.5) * cell_w), grid_y - 4), label, anchor="mb", vertical=True)


def _draw_axes(image: Image.Image, grid_x: int, grid_y: int, axes: tuple[str, str]) -> None:
    """The axes' titles in the corner the label bands leave free, above-left of the grid."""
    line = glyphs.font(_SMALL_SIZE).getmetrics()[0] + 2
    for k, text in enumerate((f"rows: {axes[0]}", f"cols: {axes[1]}")):
        fitted, size = _fit(text, _LABEL_BAND - 10, _SMALL_SIZE)  # clear of a first column label
        glyphs.draw_string(image, (grid_x - 10, grid_y - 4 - (1 - k) * line), fitted, size=size, anchor="rb",
                     colour=(90, 90, 90))


def _map_format(matrix: np.ndarray) -> list[Callable[[float], str]]:
    """The formats a map's cell values may take, most precise first, each one for every cell:
    fixed decimals giving the largest value three significant digits (then fewer), then
    e-notation. One format per map: "3e-03" beside "0.003" reads as two kinds of number."""
    finite = np.abs(matrix[np.isfinite(matrix)])
    top = float(finite.max()) if finite.size else 0.0
    leading = math.floor(math.log10(top)) if top > 0 else 0
    most = min(4, max(0, 2 - leading))
    fixed = [partial(_fixed, decimals=d) for d in range(most, -1, -1) if d > 0 or top >= 1]
    return [*fixed, lambda value: f"{value:.0e}" if np.isfinite(value) else str(value)]


def _fixed(value: float, decimals: int) -> str:
    if not np.isfinite(value):
        return str(value)
    text = f"{value:.{decimals}f}"
    return text[1:] if text.startswith("-") and float(text) == 0 else text  # a negative that rounds to 0 is 0


def _cell_texts(matrix: np.ndarray, width: float) -> tuple[list[list[str]], int] | None:
    """Every cell's value in the map's one format (see _map_format), at the font size and then
    smaller: the first format that fits every cell in `width` px (None: none fits)."""
    for fmt in _map_format(matrix):
        texts = [[fmt(float(value)) for value in row] for row in matrix]
        for size in (_FONT_SIZE, _SMALL_SIZE):
            if all(glyphs.text_width(text, size) <= width for row in texts for text in row):
                return texts, size
    return None


def _draw_values(image: Image.Image, grid_x: int, grid_y: int, matrix: np.ndarray, cells: np.ndarray) -> None:
    """Every cell's value in one format and size, dark on light cells and white on dark."""
    cell_h, cell_w = MAP_SIDE / matrix.shape[0], MAP_SIDE / matrix.shape[1]
    fitted = _cell_texts(matrix, cell_w - 2)
    if fitted is None:
        return
    texts, size = fitted
    light = cells @ np.array([0.299, 0.587, 0.114]) > 140
    for i, row in enumerate(texts):
        for j, text in enumerate(row):
            centre = (grid_x + int((j + 0.5) * cell_w), grid_y + int((i + 0.5) * cell_h))
            glyphs.draw_string(image, centre, text, size=size, anchor="mm", colour=BLACK if light[i, j] else (255, 255, 255))


def _with_bar(image: Image.Image, grid_right: int, top: int, height: int, low: float, high: float,
              lut: np.ndarray, diverging: bool, scale: str = "linear", finite_only: bool = False) -> np.ndarray:
    """The colour bar right of the grid, as tall as it: max at the top, min at the bottom, 0 in
    the middle of a diverging bar; a scale with one value (an all-zero difference) says so once,
    as "finite" when grey cells (infinities, NaN) lie outside it."""
    x = grid_right + _BAR_GAP
    bar = lut[::-1][np.linspace(0, LUT_SIZE - 1, height).astype(int)][:, None]
    image.paste(Image.fromarray(np.repeat(bar, _BAR_W, axis=1), mode="RGB"), (x, top))  # the bar alone, not the image, through numpy
    bottom = top + height - 1
    if high == low:
        ticks = [((top + bottom) // 2, f"{'finite' if finite_only else 'all'} {_tick(low, scale)}", "lm")]
    else:
        ticks = [(top, _tick(high, scale), "lt"), (bottom, _tick(low, scale), "lb")]
        if diverging:
            ticks.append(((top + bottom) // 2, "0", "lm"))
    for y, text, anchor in ticks:
        image.paste(BLACK, (x + _BAR_W, y, x + _BAR_W + 4, y + 1))
        glyphs.draw_string(image, (x + _BAR_W + 6, y), text, anchor=anchor)
    return np.array(image)


def _tick(value: float, scale: str = "linear") -> str:
    """A tick's text: the value itself on a log scale too (1e-4, not -4)."""
    if scale == "log":
        return "1" if value == 0 else f"1e{value:.0f}" if value == round(value) else f"{10.0 ** value:.2g}"
    return f"{value + 0.0:.3g}"  # + 0.0: no "-0"
