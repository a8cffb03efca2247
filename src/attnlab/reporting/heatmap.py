"""Heatmaps of attention matrices as uint8 RGB arrays, drawn with numpy and Pillow only.

Why not matplotlib: one figure per job tripled a sweep's run time. Here the cells are a colour
lookup (`lut[index]`) scaled up with `np.repeat`, and Pillow draws only the text, with fonts
loaded once per process. The same images feed TensorBoard and the HTML report.

Rules a reader can rely on:
- sequential map (viridis-like) for scores, weights, context; diverging map (blue-white-red)
  for differences, centred so that 0 is exactly white;
- token labels on both axes when an axis has at most 16 entries, and every cell's value printed
  when both axes do;
- non-finite cells are grey and never stretch the colour range; the colour bar's ticks are the
  finite range of the whole matrix;
- above 512 entries an axis is pooled to at most 512 cells by block max (signed extreme for
  differences): a pooled map is for seeing *where* something happens, and a mean would dilute
  a single peaked row, an attention sink or one wrong cell into the background. A NaN anywhere
  in a block makes the block grey. `render_heatmap_views` adds a full-resolution crop of the
  first 64 tokens so the real values stay inspectable.
"""

from __future__ import annotations

import hashlib
import os
import struct
import zlib
from collections import OrderedDict
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Callable, Iterable

import numpy as np
from PIL import Image, ImageDraw, ImageFont
import torch
import torch.nn.functional as F

MAX_SIDE = 512  # cells per axis after pooling
CROP = 64  # tokens in the full-resolution crop of a pooled map
ANNOTATE_MAX = 16  # axes up to this length get labels (and cells their value)

_FONT_SIZE = 11
_TITLE_SIZE = 13
_MARGIN = 6
_ANNOTATED_CELL_H = 20
_MAX_CELL_PX = 24
_LABEL_MIN_PX = 14  # a labelled row needs room for one line of text
_BAR_W = 14
_BAR_MIN_H = 80
_LUT_SIZE = 257  # odd, so the middle entry is exactly the centre of the range
_BACKGROUND = 255  # white
_TEXT = (0, 0, 0)
_PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
_NON_FINITE = np.array([160, 160, 160], dtype=np.uint8)

_VIRIDIS_ANCHORS = (
    (68, 1, 84), (71, 44, 122), (59, 82, 139), (44, 113, 142), (33, 145, 140),
    (39, 173, 129), (92, 200, 99), (170, 220, 50), (253, 231, 37),
)  # fmt: skip
_DIVERGING_ANCHORS = (
    (5, 48, 97), (33, 102, 172), (67, 147, 195), (146, 197, 222), (255, 255, 255),
    (244, 165, 130), (214, 96, 77), (178, 24, 43), (103, 0, 31),
)  # fmt: skip


def _lut(anchors: tuple[tuple[int, int, int], ...]) -> np.ndarray:
    """A (_LUT_SIZE, 3) uint8 table interpolated linearly between evenly spaced anchors."""
    anchor_at = np.linspace(0.0, 1.0, len(anchors))
    at = np.linspace(0.0, 1.0, _LUT_SIZE)
    channels = [np.interp(at, anchor_at, [a[c] for a in anchors]) for c in range(3)]
    return np.rint(np.stack(channels, axis=1)).astype(np.uint8)


SEQUENTIAL_LUT = _lut(_VIRIDIS_ANCHORS)
DIVERGING_LUT = _lut(_DIVERGING_ANCHORS)


@lru_cache(maxsize=None)
def _font(size: int) -> ImageFont.FreeTypeFont:
    """Pillow's bundled font (no font files needed, Pillow >= 10.1), loaded once per size."""
    return ImageFont.load_default(size=size)


def to_png_bytes(image: np.ndarray) -> bytes:
    """PNG-encode an (H, W, 3) uint8 image, written by hand: rows unfiltered, zlib level 1.

    Pillow's PNG writer tries adaptive filters on every row; a heatmap is flat colour blocks that
    zlib alone compresses, so this is faster and smaller (the ratio: benchmarks/README.md).
    """
    height, width, channels = image.shape
    if channels != 3 or image.dtype != np.uint8:
        raise ValueError(f"expected an (H, W, 3) uint8 image, got {image.shape} {image.dtype}")
    rows = np.concatenate([np.zeros((height, 1), np.uint8), image.reshape(height, width * 3)], axis=1)
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)  # 8-bit RGB, no interlace
    return b"".join(
        [_PNG_SIGNATURE, _png_chunk(b"IHDR", header), _png_chunk(b"IDAT", _deflate(rows.tobytes())),
         _png_chunk(b"IEND", b"")]
    )


PARALLEL_DEFLATE_BYTES = 2**21  # below, one zlib call; above, bands compressed on every core


def _deflate(data: bytes) -> bytes:
    """zlib.compress(data, 1), the same stream format: above PARALLEL_DEFLATE_BYTES as pigz does it,
    raw deflate bands (each but the last ended by a full flush, so they concatenate) compressed in
    threads (zlib lets go of the GIL), behind zlib's header and the adler32 of the whole."""
    n_bands = min(os.cpu_count() or 1, len(data) // PARALLEL_DEFLATE_BYTES)
    if n_bands < 2:
        return zlib.compress(data, 1)
    edges = [len(data) * i // n_bands for i in range(n_bands + 1)]

    def band(i: int) -> bytes:
        deflate = zlib.compressobj(1, zlib.DEFLATED, -15)  # raw deflate: no header, no checksum
        last = i == n_bands - 1
        return deflate.compress(data[edges[i]:edges[i + 1]]) + deflate.flush(zlib.Z_FINISH if last else zlib.Z_FULL_FLUSH)

    return b"\x78\x01" + b"".join(_in_threads(band, range(n_bands))) + struct.pack(">I", zlib.adler32(data))


def _png_chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))


def render_heatmap_views(
    values: np.ndarray,
    *,
    title: str,
    row_labels: list[str] | None = None,
    col_labels: list[str] | None = None,
    diverging: bool = False,
) -> dict[str, np.ndarray]:
    """`{"main": image}`, plus `"crop64"` (first 64 rows and columns, unpooled) when pooled.

    A (heads, rows, cols) array is a head grid: each head's map, labelled, side by side.
    """
    if np.ndim(values) == 3 and np.shape(values)[0] > 1:
        per_head = _in_threads(lambda h: render_heatmap_views(values[h], title=f"{title} · head {h}",
                                                              row_labels=row_labels, col_labels=col_labels,
                                                              diverging=diverging), range(np.shape(values)[0]))
        return {view: side_by_side([views[view] for views in per_head]) for view in per_head[0]}
    matrix, title = _as_matrix(values, title)
    views = {"main": render_heatmap(matrix, title=title, row_labels=row_labels, col_labels=col_labels,
                                    diverging=diverging)}
    if max(matrix.shape) > MAX_SIDE:
        crop = matrix[:CROP, :CROP]
        views["crop64"] = render_heatmap(
            crop,
            title=f"{title} (first {CROP})",
            row_labels=None if row_labels is None else row_labels[:CROP],
            col_labels=None if col_labels is None else col_labels[:CROP],
            diverging=diverging,
        )
    return views


@dataclass(frozen=True)
class EncodedHeatmap:
    png: bytes
    height: int
    width: int


class _EncodedCache:
    """Encoded views by key, least recently used first, within a budget of PNG bytes."""

    def __init__(self, budget: int):
        self.budget, self.size = budget, 0
        self.entries: OrderedDict[bytes, dict[str, EncodedHeatmap]] = OrderedDict()

    def get(self, key: bytes) -> dict[str, EncodedHeatmap] | None:
        if key in self.entries:
            self.entries.move_to_end(key)
        return self.entries.get(key)

    def put(self, key: bytes, views: dict[str, EncodedHeatmap]) -> None:
        self.entries[key] = views
        self.size += _png_bytes(views)
        while self.size > self.budget:
            self.size -= _png_bytes(self.entries.popitem(last=False)[1])


def _png_bytes(views: dict[str, EncodedHeatmap]) -> int:
    return sum(len(view.png) for view in views.values())


_ENCODED = _EncodedCache(budget=64 * 2**20)
CACHED_MAX_ELEMENTS = 65_536  # 256 x 256


def encoded_heatmap_views(
    values: np.ndarray,
    *,
    title: str,
    row_labels: list[str] | None = None,
    col_labels: list[str] | None = None,
    diverging: bool = False,
) -> dict[str, EncodedHeatmap]:
    """`render_heatmap_views`, PNG-encoded, and remembered by content for the life of the process
    up to CACHED_MAX_ELEMENTS values.

    Why: the jobs of a sweep that share a seed draw the same reference maps (and the reference
    variant's all-zero differences), and the basic launcher runs them all in one process; an
    image is a few milliseconds, a job's budget is fifty. The key hashes everything drawn, so a
    hit is the image the call would have drawn. Larger matrices are drawn each time: hashing a
    16384-token map costs seconds, and a sweep at that size is rare.
    """
    array = np.ascontiguousarray(values, dtype=np.float32)
    key = None
    if array.size <= CACHED_MAX_ELEMENTS:
        digest = hashlib.blake2b(repr((array.shape, title, row_labels, col_labels, diverging)).encode(), digest_size=20)
        digest.update(array)  # the buffer itself, not a copy
        key = digest.digest()
        cached = _ENCODED.get(key)
        if cached is not None:
            return cached
    views = render_heatmap_views(array, title=title, row_labels=row_labels, col_labels=col_labels, diverging=diverging)
    pngs = _in_threads(to_png_bytes, views.values())
    encoded = {view: EncodedHeatmap(png, image.shape[0], image.shape[1]) for (view, image), png in zip(views.items(), pngs)}
    if key is not None:
        _ENCODED.put(key, encoded)
    return encoded


def _in_threads(fn: Callable[[Any], Any], items: Iterable[Any]) -> list[Any]:
    """[fn(item) for item in items], on every core: numpy, zlib and torch's pooling let go of the
    GIL, and a long run's images were most of its wall time (benchmarks/README.md)."""
    items = list(items)
    if len(items) < 2:
        return [fn(item) for item in items]
    with ThreadPoolExecutor(max_workers=min(len(items), os.cpu_count() or 1)) as pool:
        return list(pool.map(fn, items))


def side_by_side(images: list[np.ndarray], gap: int = 8) -> np.ndarray:
    """Images of any heights in one row on a white background, top-aligned."""
    height = max(image.shape[0] for image in images)
    width = sum(image.shape[1] for image in images) + gap * (len(images) - 1)
    grid = np.full((height, width, 3), _BACKGROUND, dtype=np.uint8)
    x = 0
    for image in images:
        grid[: image.shape[0], x : x + image.shape[1]] = image
        x += image.shape[1] + gap
    return grid


def render_heatmap(
    values: np.ndarray,
    *,
    title: str,
    row_labels: list[str] | None = None,
    col_labels: list[str] | None = None,
    diverging: bool = False,
) -> np.ndarray:
    """Render a matrix as an (H, W, 3) uint8 heatmap with labels, colour bar and title.

    A 1-d array is drawn as one row; for more than 2 dimensions the first matrix of the leading
    (batch, head) axes is drawn, and the title says so. Labels default to indices.
    """
    matrix, title = _as_matrix(values, title)
    low, high = _colour_range(matrix, diverging)
    pooled, blocks = _pool(matrix, diverging)
    if blocks != (1, 1):
        how = "signed extreme" if diverging else "max"
        title = f"{title} ({matrix.shape[0]}x{matrix.shape[1]}, block {how} {blocks[0]}x{blocks[1]})"
    rows = _axis_labels(row_labels, matrix.shape[0], "row")
    cols = _axis_labels(col_labels, matrix.shape[1], "column")
    lut = DIVERGING_LUT if diverging else SEQUENTIAL_LUT
    cells = _colour(pooled, low, high, lut)
    layout = _Layout.plan(pooled.shape, title, rows, cols, cell_text=_cell_texts(pooled))
    canvas = np.full((layout.height, layout.width, 3), _BACKGROUND, dtype=np.uint8)
    grid = cells if layout.cell_h == layout.cell_w == 1 else np.repeat(np.repeat(cells, layout.cell_h, axis=0),
                                                                        layout.cell_w, axis=1)
    canvas[layout.grid_y : layout.grid_y + grid.shape[0], layout.grid_x : layout.grid_x + grid.shape[1]] = grid
    bar = np.repeat(lut[::-1][np.linspace(0, _LUT_SIZE - 1, layout.bar_h).astype(int)][:, None], _BAR_W, axis=1)
    canvas[layout.grid_y : layout.grid_y + layout.bar_h, layout.bar_x : layout.bar_x + _BAR_W] = bar
    image = Image.fromarray(canvas, mode="RGB")
    _draw_text(image, layout, title, rows, cols, cells)
    _draw_ticks(image, layout, low, high, diverging)
    return np.array(image)


def _as_matrix(values: np.ndarray, title: str) -> tuple[np.ndarray, str]:
    """The 2-d matrix to draw and its title ("weights [0, 0]" for the first of batch x heads)."""
    array = np.asarray(values, dtype=np.float32)
    if array.ndim == 0:
        raise ValueError("a heatmap needs at least one dimension")
    if array.ndim == 1:
        return array[None, :], title
    if array.ndim == 2:
        return array, title
    leading = (0,) * (array.ndim - 2)
    return array[leading], f"{title} [{', '.join(map(str, leading))}]"


def _colour_range(matrix: np.ndarray, diverging: bool) -> tuple[float, float]:
    """Finite min/max of the whole matrix (symmetric around 0 for a diverging map)."""
    finite_mask = np.isfinite(matrix)
    finite = matrix if finite_mask.all() else matrix[finite_mask]  # no 64 MB copy when all finite
    if finite.size == 0:
        return 0.0, 0.0
    low, high = float(finite.min()), float(finite.max())
    if diverging:
        extent = max(abs(low), abs(high))
        return -extent, extent
    return low, high


def _pool(matrix: np.ndarray, diverging: bool) -> tuple[np.ndarray, tuple[int, int]]:
    """Block-pool each axis longer than MAX_SIDE; returns the pooled matrix and block sizes."""
    blocks = tuple(-(-n // MAX_SIDE) for n in matrix.shape)
    if blocks == (1, 1):
        return matrix, (1, 1)
    high, low = _block_extremes(matrix, blocks, diverging)
    pooled = high if low is None else np.where(np.abs(low) > np.abs(high), low, high)
    return pooled, (blocks[0], blocks[1])


def _block_extremes(matrix: np.ndarray, blocks: tuple[int, ...], diverging: bool) -> tuple[np.ndarray, np.ndarray | None]:
    """Max (and, diverging, min) of each block, the last blocks of a side partial; NaN propagates:
    a grey block. torch's max pooling, on the array's own memory: numpy's strided reductions
    were most of a long run's TensorBoard images (benchmarks/README.md)."""
    values = torch.from_numpy(np.ascontiguousarray(matrix, dtype=np.float32))[None, None]  # (1, 1, rows, cols)

    def pool(t: torch.Tensor) -> np.ndarray:
        return F.max_pool2d(t, kernel_size=blocks, stride=blocks, ceil_mode=True)[0, 0].numpy()

    return pool(values), -pool(-values) if diverging else None


def _colour(matrix: np.ndarray, low: float, high: float, lut: np.ndarray) -> np.ndarray:
    """Map values to LUT colours; a constant matrix takes the middle colour.

    Infinities are grey like NaN, not the ends of the scale: a learner must see them.
    """
    span = high - low
    finite = np.isfinite(matrix)
    if span > 0:
        with np.errstate(invalid="ignore", over="ignore"):
            t = (matrix - low) * np.float32((_LUT_SIZE - 1) / span)  # one temporary, scaled in place below
        np.clip(t, 0.0, _LUT_SIZE - 1, out=t)
        t[~finite] = 0.0  # coloured below
        index = (t + 0.5).astype(np.uint16)  # rounds half up: t >= 0
    else:
        index = np.full(matrix.shape, round(0.5 * (_LUT_SIZE - 1)), dtype=np.uint16)
    cells = lut[index]
    cells[~finite] = _NON_FINITE
    return cells


def _axis_labels(labels: list[str] | None, n: int, axis: str) -> list[str] | None:
    """Labels to draw on one axis, or None when the axis is too long to label."""
    if labels is not None and len(labels) != n:
        raise ValueError(f"{len(labels)} {axis} labels for {n} {axis}s")
    if n > ANNOTATE_MAX:
        return None
    return [_shorten(str(label)) for label in labels] if labels is not None else [str(i) for i in range(n)]


def _shorten(label: str, limit: int = 12) -> str:
    return label if len(label) <= limit else label[: limit - 2] + ".."


def _format(value: float) -> str:
    return f"{value:.3g}" if np.isfinite(value) else str(value)


def _cell_texts(matrix: np.ndarray) -> list[list[str]] | None:
    if max(matrix.shape) > ANNOTATE_MAX:
        return None
    return [[_format(float(v)) for v in row] for row in matrix]


@dataclass(frozen=True)
class _Layout:
    """Pixel positions of every part: title on top, column labels, row labels | grid | bar."""

    width: int
    height: int
    grid_x: int
    grid_y: int
    cell_w: int
    cell_h: int
    bar_x: int
    bar_h: int
    rotate_cols: bool
    cell_text: list[list[str]] | None

    @classmethod
    def plan(cls, shape: tuple[int, int], title: str, rows: list[str] | None, cols: list[str] | None, *,
             cell_text: list[list[str]] | None) -> _Layout:
        n_rows, n_cols = shape
        if cell_text is not None:
            widest = max(_text_width(text) for row in cell_text for text in row)
            cell_w, cell_h = max(widest + 8, 28), _ANNOTATED_CELL_H
        else:
            cell_w = _cell_px(n_cols, labelled=False)
            cell_h = _cell_px(n_rows, labelled=rows is not None)
        col_w = max((_text_width(c) for c in cols or []), default=0)
        rotate_cols = cols is not None and col_w > cell_w - 2
        line = _font(_FONT_SIZE).getmetrics()[0] + 3
        col_band = 0 if cols is None else (col_w + 4 if rotate_cols else line)
        row_band = 0 if rows is None else max(_text_width(r) for r in rows) + 6
        title_band = _font(_TITLE_SIZE).getmetrics()[0] + 2 * _MARGIN
        grid_x, grid_y = _MARGIN + row_band, title_band + col_band
        grid_w, grid_h = n_cols * cell_w, n_rows * cell_h
        bar_x = grid_x + grid_w + 2 * _MARGIN
        bar_h = max(grid_h, _BAR_MIN_H)
        tick_w = _text_width("-0.000e+00")
        width = max(bar_x + _BAR_W + 4 + tick_w + _MARGIN, _text_width(title, _TITLE_SIZE) + 2 * _MARGIN)
        height = grid_y + bar_h + _MARGIN + line // 2
        return cls(width, height, grid_x, grid_y, cell_w, cell_h, bar_x, bar_h, rotate_cols, cell_text)

    def row_centre(self, i: int) -> int:
        return self.grid_y + i * self.cell_h + self.cell_h // 2

    def col_centre(self, j: int) -> int:
        return self.grid_x + j * self.cell_w + self.cell_w // 2


def _cell_px(n: int, *, labelled: bool) -> int:
    return max(_LABEL_MIN_PX if labelled else 1, min(_MAX_CELL_PX, MAX_SIDE // n))


def _draw_text(image: Image.Image, layout: _Layout, title: str, rows: list[str] | None,
               cols: list[str] | None, cells: np.ndarray) -> None:
    _draw_string(image, (_MARGIN, _MARGIN), title, size=_TITLE_SIZE)
    for i, label in enumerate(rows or []):
        _draw_string(image, (layout.grid_x - 4, layout.row_centre(i)), label, anchor="rm")
    for j, label in enumerate(cols or []):
        _draw_string(image, (layout.col_centre(j), layout.grid_y - 2), label, anchor="mb",
                     vertical=layout.rotate_cols)
    light = cells @ np.array([0.299, 0.587, 0.114]) > 140  # dark text on light cells, white on dark
    for i, row in enumerate(layout.cell_text or []):
        for j, text in enumerate(row):
            colour = _TEXT if light[i, j] else (255, 255, 255)
            _draw_string(image, (layout.col_centre(j), layout.row_centre(i)), text, anchor="mm", colour=colour)


def _draw_ticks(image: Image.Image, layout: _Layout, low: float, high: float, diverging: bool) -> None:
    """Max at the top of the bar, min at the bottom, and 0 in the middle of a diverging bar."""
    x = layout.bar_x + _BAR_W
    top, bottom = layout.grid_y, layout.grid_y + layout.bar_h - 1
    ticks = [(top, high, "lt"), (bottom, low, "lb")]
    if diverging:
        ticks.append(((top + bottom) // 2, 0.0, "lm"))
    for y, value, anchor in ticks:
        image.paste(_TEXT, (x, y, x + 4, y + 1))
        _draw_string(image, (x + 6, y), f"{value:.4g}", anchor=anchor)


@lru_cache(maxsize=None)
def _glyph(char: str, size: int) -> np.ndarray:
    """One character's alpha mask, one line high and one advance wide, rendered by FreeType once.

    ImageDraw.text runs a full FreeType layout per call and a map draws dozens of strings; pasting
    cached glyphs side by side is far cheaper (the ratio: benchmarks/README.md). Kerning is lost,
    which numbers and short labels do not need.
    """
    font = _font(size)
    ascent, descent = font.getmetrics()
    image = Image.new("L", (max(round(font.getlength(char)), 1), ascent + descent), 0)
    ImageDraw.Draw(image).text((0, ascent), char, fill=255, font=font, anchor="ls")
    return np.asarray(image)


def _text_width(text: str, size: int = _FONT_SIZE) -> int:
    return sum(_glyph(char, size).shape[1] for char in text)


@lru_cache(maxsize=4096)
def _text_mask(text: str, size: int, vertical: bool) -> Image.Image:
    """A string's alpha mask; labels and ticks repeat across a job's images, hence the cache.

    Vertical text reads upwards."""
    mask = Image.fromarray(np.concatenate([_glyph(char, size) for char in text or " "], axis=1), mode="L")
    return mask.transpose(Image.Transpose.ROTATE_90) if vertical else mask


def _draw_string(image: Image.Image, xy: tuple[int, int], text: str, *, size: int = _FONT_SIZE,
                 anchor: str = "lt", colour: tuple[int, int, int] = _TEXT, vertical: bool = False) -> None:
    """Paste `colour` through the string's mask; anchors as in Pillow (l/m/r, then t/m/b)."""
    mask = _text_mask(text, size, vertical)
    x = xy[0] - {"l": 0, "m": mask.width // 2, "r": mask.width}[anchor[0]]
    y = xy[1] - {"t": 0, "m": mask.height // 2, "b": mask.height}[anchor[1]]
    image.paste(colour, (x, y, x + mask.width, y + mask.height), mask)
