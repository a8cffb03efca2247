"""The colour tables of attnlab's pictures: a viridis-like sequential map, a blue-white-red diverging
map whose middle entry is exactly white, and the greys and black around them."""

from __future__ import annotations

import numpy as np

LUT_SIZE = 257  # odd, so the middle entry is exactly the centre of the range
BACKGROUND = 255  # white
BLACK = (0, 0, 0)
NON_FINITE = np.array([160, 160, 160], dtype=np.uint8)  # grey: a cell that is NaN, an infinity or masked

_VIRIDIS_ANCHORS = (
    (68, 1, 84), (71, 44, 122), (59, 82, 139), (44, 113, 142), (33, 145, 140),
    (39, 173, 129), (92, 200, 99), (170, 220, 50), (253, 231, 37),
)  # fmt: skip
_DIVERGING_ANCHORS = (
    (5, 48, 97), (33, 102, 172), (67, 147, 195), (146, 197, 222), (255, 255, 255),
    (244, 165, 130), (214, 96, 77), (178, 24, 43), (103, 0, 31),
)  # fmt: skip


def lut(anchors: tuple[tuple[int, int, int], ...]) -> np.ndarray:
    """A (LUT_SIZE, 3) uint8 table interpolated linearly between evenly spaced anchors."""
    anchor_at = np.linspace(0.0, 1.0, len(anchors))
    at = np.linspace(0.0, 1.0, LUT_SIZE)
    channels = [np.interp(at, anchor_at, [a[c] for a in anchors]) for c in range(3)]
    return np.rint(np.stack(channels, axis=1)).astype(np.uint8)


SEQUENTIAL_LUT = lut(_VIRIDIS_ANCHORS)
DIVERGING_LUT = lut(_DIVERGING_ANCHORS)
