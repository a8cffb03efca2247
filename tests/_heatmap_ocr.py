"""Reading a heatmap's cell values back off a screenshot, as a user's eyes would: each heatmap is
found where a viewer drew it (at whatever size) by its colour bar, told apart from the others by
its pixels, and its cells' texts read by tesseract (the system's `tesseract-ocr`, called as a
program: no Python binding needed). Used by the browser tests of every viewer
(tests/sinks/test_browser_numbers.py)."""

from __future__ import annotations

import math
import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from PIL import Image

from attnlab.reporting import heatmap

TESSERACT = shutil.which("tesseract")

_LEVEL = 6  # a colour bar's row is one colour across (a resampled edge aside)
_SMOOTH = 20  # and changes at most this much (per channel) from one row to the next
_UPSCALE = 4  # a cell's text is ~9 px tall on screen; tesseract reads glyphs of ~30 px
_ONE_THREAD = {**os.environ, "OMP_THREAD_LIMIT": "1"}  # the machine's other work keeps its cores


@dataclass(frozen=True)
class Shown:
    """One heatmap as a viewer displays it: which image it is, its pixels on screen, its scale."""

    name: str
    pixels: np.ndarray
    scale: float


def colour_bars(screen: np.ndarray) -> list[tuple[int, int, int, int]]:
    """(left, top, width, height) of every colour bar on screen: a block of rows each one colour
    across, changing smoothly down from one end of a colour map to the other (a column of similar
    cells changes little overall; neighbouring cells of different colours jump)."""
    s = screen.astype(np.int16)
    level = np.abs(s[:, 1:] - s[:, :-1]).max(-1) <= _LEVEL
    across = level[:, :-8].copy()
    for k in range(1, 8):
        across &= level[:, k:k + across.shape[1]]
    smooth = np.abs(s[1:, :across.shape[1]] - s[:-1, :across.shape[1]]).max(-1) <= _SMOOTH
    ok = across[1:] & smooth
    columns: dict[tuple[int, int], list[int]] = {}
    for x in range(ok.shape[1]):
        edges = np.diff(np.concatenate([[0], ok[:, x].astype(np.int8), [0]]))
        for a, b in zip(np.flatnonzero(edges == 1), np.flatnonzero(edges == -1)):
            top, bottom = int(a), int(b)  # rows top..bottom of the screen (ok[r] compares r and r + 1)
            if bottom - top >= heatmap.MAP_SIDE // 2 and np.abs(s[top, x] - s[bottom, x]).sum() > 150:
                columns.setdefault((top, bottom), []).append(x)
    bars = []
    for (top, bottom), xs in columns.items():
        height = bottom - top + 1
        breaks = [k + 1 for k in range(len(xs) - 1) if xs[k + 1] != xs[k] + 1]
        for run in np.split(np.array(xs), breaks):  # bars side by side share their rows
            width = int(run[-1] - run[0]) + 1 + 8  # the last column's 8 levels to its right
            if abs(width - heatmap._BAR_W * height / heatmap.MAP_SIDE) <= 3:
                bars.append((int(run[0]), top, width, height))
    return bars


def _layout() -> tuple[int, int, int]:
    """(grid's left, grid's top, colour bar's left) in a single map's own pixels."""
    grid_x, grid_y = heatmap._MARGIN + heatmap._LABEL_BAND, heatmap._title_band() + heatmap._LABEL_BAND
    return grid_x, grid_y, grid_x + heatmap.MAP_SIDE + heatmap._BAR_GAP


def shown_maps(screen: np.ndarray, images: dict[str, np.ndarray]) -> list[Shown]:
    """Every single map of `images` ({name: pixels}) on screen, at the size shown: located by its
    colour bar, named by the image its pixels are closest to (a bar whose surroundings match no
    image is not one of them)."""
    grid_x, grid_y, bar_x = _layout()
    found = []
    for left, top, _width, height in colour_bars(screen):
        scale = height / heatmap.MAP_SIDE
        x0, y0 = round(left - bar_x * scale), round(top - grid_y * scale)
        best, error = None, math.inf
        for name, image in images.items():
            size = (round(image.shape[1] * scale), round(image.shape[0] * scale))
            shown = screen[y0:y0 + size[1], x0:x0 + size[0]]
            if x0 < 0 or y0 < 0 or shown.shape[:2] != (size[1], size[0]):
                continue
            expected = np.asarray(Image.fromarray(image).resize(size, Image.Resampling.BILINEAR)).astype(int)
            mismatch = float(np.abs(shown.astype(int) - expected).mean())
            if mismatch < error:
                best, error = Shown(name, shown, scale), mismatch
        if best is not None and error < 12:
            found.append(best)
    return found


def _cell_crop(shown: Shown, shape: tuple[int, int], i: int, j: int) -> Image.Image:
    """Cell (i, j) of a shown map, text dark on white, enlarged for tesseract."""
    grid_x, grid_y, _ = _layout()
    side_h, side_w = heatmap.MAP_SIDE / shape[0], heatmap.MAP_SIDE / shape[1]
    s = shown.scale
    box = (math.ceil((grid_x + j * side_w) * s) + 1, math.ceil((grid_y + i * side_h) * s) + 1,
           math.floor((grid_x + (j + 1) * side_w) * s) - 1, math.floor((grid_y + (i + 1) * side_h) * s) - 1)
    pixels = np.asarray(Image.fromarray(shown.pixels).crop(box).convert("L")).astype(float)
    ink = np.abs(pixels - np.median(pixels))  # the text, whatever its colour against the cell's
    rows, cols = np.flatnonzero(ink.max(1) > 40), np.flatnonzero(ink.max(0) > 40)
    if not len(rows):
        return Image.new("L", (1, 1), 255)
    ink = ink[max(rows[0] - 2, 0):rows[-1] + 3, max(cols[0] - 2, 0):cols[-1] + 3]
    text = Image.fromarray((255 - np.clip(ink * 255 / ink.max(), 0, 255)).astype(np.uint8))
    return text.resize((text.width * _UPSCALE, text.height * _UPSCALE), Image.Resampling.LANCZOS)


def read_cells(maps: list[tuple[Shown, tuple[int, int]]], work: Path) -> list[list[list[str]]]:
    """Each map's cell texts ([row][col], '' where nothing was read), by one tesseract call for
    all: each cell's text on a line of its own on one sheet (words side by side run together
    when the whitelist has no space), the words read assigned to the line their centre is in."""
    cells = [(m, i, j) for m, (_, shape) in enumerate(maps) for i in range(shape[0]) for j in range(shape[1])]
    crops = [_cell_crop(maps[m][0], maps[m][1], i, j) for m, i, j in cells]
    line = max(crop.height for crop in crops) + 8 * _UPSCALE
    sheet = Image.new("L", (max(crop.width for crop in crops) + 16 * _UPSCALE, line * len(crops)), 255)
    for k, crop in enumerate(crops):
        sheet.paste(crop, (8 * _UPSCALE, k * line + (line - crop.height) // 2))
    sheet.save(work / "cells.png")
    tsv = subprocess.run([TESSERACT, str(work / "cells.png"), "stdout", "--psm", "6", "-c",
                          "tessedit_char_whitelist=-.0123456789e", "tsv"],
                         capture_output=True, text=True, check=True, timeout=120, env=_ONE_THREAD).stdout
    texts = [[[""] * shape[1] for _ in range(shape[0])] for _, shape in maps]
    for row in tsv.splitlines()[1:]:
        field = row.split("\t")
        if len(field) < 12 or field[0] != "5" or not field[11].strip():
            continue
        top, height = int(field[7]), int(field[9])
        m, i, j = cells[min((top + height // 2) // line, len(cells) - 1)]
        texts[m][i][j] += field[11].strip()
    return texts


def reads_as(text: str, value: float) -> bool:
    """Whether `text`, read off a cell, is `value` written as the text writes it (its decimals, or
    its e-notation): a reader takes '.045' for 0.045 and '0.13' for 0.130, never '0.052' for -0.052."""
    if text.startswith(("-.", ".")):
        text = text.replace(".", "0.", 1)
    if "e" in text:
        mantissa = text.split("e")[0]
        written = f"{value:.{len(mantissa.split('.')[1]) if '.' in mantissa else 0}e}"
    else:
        written = f"{value:.{len(text.split('.')[1]) if '.' in text else 0}f}"
        written = written[1:] if written.startswith("-") and float(written) == 0 else written  # no '-0'
    return text == written


def decimals_read(texts: list[list[str]]) -> int:
    """The decimals most cells were read with (a map prints every cell in one format)."""
    counts = [len(t.split(".")[1]) for row in texts for t in row if "." in t and "e" not in t]
    return max(set(counts), key=counts.count) if counts else 0
