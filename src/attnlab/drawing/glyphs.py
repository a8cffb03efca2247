"""Text drawn into images: one font (a DejaVu Sans Condensed subset, its licence beside it) at a
few sizes, each string's mask rendered once per process and pasted in its colour."""

from __future__ import annotations

from functools import cache, lru_cache
from pathlib import Path

from PIL import Image, ImageDraw, ImageFont

from attnlab.drawing.colours import BLACK

TEXT_SIZE = 11  # px: labels, ticks, cell values


FONT_FILE = Path(__file__).with_name("fonts") / "DejaVuSansCondensed-subset.ttf"  # licence beside it


@cache
def font(size: int) -> ImageFont.FreeTypeFont:
    """DejaVu Sans Condensed (Latin, Greek, punctuation and maths signs), loaded once per size:
    Pillow's own font draws a space a pixel wide ("1e-4to 1") and strokes that a viewer's
    downscaling erases; a narrow face with even strokes keeps the digits and signs readable."""
    return ImageFont.truetype(str(FONT_FILE), size=size, layout_engine=ImageFont.Layout.BASIC)  # no libraqm: one layout everywhere


@lru_cache(maxsize=4096)
def text_width(text: str, size: int = TEXT_SIZE) -> int:
    return round(font(size).getlength(text))


def draw_string(image: Image.Image, xy: tuple[int, int], text: str, *, size: int = TEXT_SIZE,
                anchor: str = "lt", colour: tuple[int, int, int] = BLACK, vertical: bool = False) -> None:
    """Pillow's ImageDraw.text, anchors as in Pillow (l/m/r, then t/m/b), through the string's
    mask: the same pixels, since Pillow draws text as `colour` through that mask. Lines of text
    (which sit at fractions of a pixel) are Pillow's to draw."""
    if "\n" in text and not vertical:
        ImageDraw.Draw(image).text(xy, text, fill=colour, font=font(size), anchor=anchor)
        return
    mask, dx, dy = _text_mask(text, size, anchor, vertical)
    if mask is not None:
        x, y = xy[0] + dx, xy[1] + dy
        image.paste(colour, (x, y, x + mask.width, y + mask.height), mask)


@lru_cache(maxsize=4096)
def _text_mask(text: str, size: int, anchor: str, vertical: bool) -> tuple[Image.Image | None, int, int]:
    """A string's alpha mask drawn by ImageDraw.text, and where its corner sits from the anchor
    point; a job's images repeat their labels, titles and ticks, and so do a sweep's jobs.
    Vertical text reads upwards: drawn on a mask of its own and turned, since Pillow turns text
    only with libraqm."""
    face = font(size)
    if not vertical:
        box = ImageDraw.Draw(Image.new("L", (1, 1))).textbbox((0, 0), text, font=face, anchor=anchor)
        left, top, right, bottom = (int(edge) for edge in box)  # whole pixels with the basic layout
        if right <= left or bottom <= top:
            return None, 0, 0
        mask = Image.new("L", (right - left, bottom - top), 0)
        ImageDraw.Draw(mask).text((-left, -top), text, fill=255, font=face, anchor=anchor)
        return mask, left, top
    ascent, descent = face.getmetrics()
    mask = Image.new("L", (max(text_width(text, size), 1), ascent + descent), 0)
    ImageDraw.Draw(mask).text((0, ascent), text, fill=255, font=face, anchor="ls")
    mask = mask.transpose(Image.Transpose.ROTATE_90)
    dx = -{"l": 0, "m": mask.width // 2, "r": mask.width}[anchor[0]]
    dy = -{"t": 0, "m": mask.height // 2, "b": mask.height}[anchor[1]]
    return mask, dx, dy
