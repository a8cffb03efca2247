"""An intervention sweep's effect as a layer × head grid (activation patching's familiar picture).

From the records of one run over heads (`intervene.head=all`: each layer's record holds each head's
edit's effect) or of a sweep over `layer=` and `intervene.head=` (a record per edit):
`effect_by_layer_and_head.csv`, one row per layer, one column per head, each cell the mean KL of
the model's next-token distributions with that head edited, and the same grid as a heatmap PNG.
Nothing is written unless the records hold an intervention on more than one layer or head.
"""

from __future__ import annotations

import csv
import math
from collections.abc import Iterable
from pathlib import Path

import numpy as np

from attnlab.record import Record

NAME = "effect_by_layer_and_head"


def effect_grid(records: Iterable[Record]) -> tuple[list[str], list[int], np.ndarray] | None:
    """(layer names, heads, (layers, heads) mean KL, NaN where no record ran) or None."""
    cells: dict[tuple[str, int], float] = {}
    for record in records:
        if record.model is None:
            continue
        layer = record.model.layer_name
        if record.model.edited_heads is not None:  # one run's edits, one head at a time
            for edited, edited_effect in zip(record.model.edited_heads, record.model.head_effects or []):
                cells[layer, edited] = edited_effect.kl_mean
            continue
        head = ((record.config or {}).get("intervene") or {}).get("head")
        if not isinstance(head, int):
            continue
        effect = record.model.effect
        cells[layer, head] = effect.kl_mean if record.status == "ok" and effect is not None else math.nan
    layers = sorted({layer for layer, _ in cells}, key=lambda name: [int(p) if p.isdigit() else p for p in name.split(".")])
    heads = sorted({head for _, head in cells})
    if len(layers) * len(heads) < 2:
        return None
    grid = np.full((len(layers), len(heads)), math.nan)  # (layers, heads)
    for (layer, head), value in cells.items():
        grid[layers.index(layer), heads.index(head)] = value
    return layers, heads, grid


def write_effect_grid(records: Iterable[Record], folder: Path) -> list[Path]:
    """The grid's CSV and heatmap PNG in `folder`; none without edits of several layers or heads."""
    from attnlab.drawing.png import to_png_bytes  # Pillow: only when there is a grid
    from attnlab.reporting.heatmap import render_heatmap

    found = effect_grid(records)
    if found is None:
        return []
    layers, heads, grid = found
    table = folder / f"{NAME}.csv"
    with table.open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["layer", *(f"head {h}" for h in heads)])
        writer.writerows([layer, *(repr(float(v)) for v in row)] for layer, row in zip(layers, grid))
    picture = folder / f"{NAME}.png"
    image = render_heatmap(grid, title="effect of each edited head: mean KL(model || edited)",
                           row_labels=layers, col_labels=[str(h) for h in heads], axes=("layer", "head"))
    picture.write_bytes(to_png_bytes(image))
    return [table, picture]
