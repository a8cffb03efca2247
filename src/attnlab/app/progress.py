"""A one-line progress bar on stderr for long jobs (many seeds, large inputs).

Drawn only when stderr is a terminal and `log.progress` is on; a pipe, a file, a CI log or a
SLURM output file gets nothing. It appears only once the work has run for `DELAY` seconds, so
a 6-token run never flickers a bar, and it redraws at most every `INTERVAL` seconds, so 100
fast seeds do not cost 100 terminal writes. Hand-written rather than tqdm: one loop of seeds
with a phase name needs ~60 lines, not a dependency.
"""

from __future__ import annotations

import os
import shutil
import sys
import time
from typing import TextIO

DELAY = float(os.environ.get("ATTNLAB_PROGRESS_DELAY", "0.5"))  # seconds before the bar appears
INTERVAL = 0.1  # seconds between redraws
BAR_WIDTH = 20


def is_terminal(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):  # replaced or closed streams
        return False


def _clock(seconds: float) -> str:
    seconds = int(seconds)
    return f"{seconds // 60}:{seconds % 60:02d}"


class Progress:
    """`with Progress(total, label="seeds") as bar: ... bar.phase("forward") ... bar.advance()`."""

    def __init__(self, total: int, *, label: str = "seeds", enabled: bool = True, stream: TextIO | None = None,
                 delay: float | None = None) -> None:
        self.total, self.label, self.done, self.current = max(total, 1), label, 0, ""
        self.stream = stream if stream is not None else sys.stderr
        self.active = enabled and is_terminal(self.stream)
        self.delay = DELAY if delay is None else delay
        self.start = time.perf_counter()
        self._last_draw = 0.0
        self.visible = False  # on screen now

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def phase(self, name: str) -> None:
        self.current = name
        self._maybe_draw()

    def advance(self, n: int = 1) -> None:
        self.done = min(self.done + n, self.total)
        if self.done == self.total and self.active and time.perf_counter() - self.start >= self.delay:
            self._draw(time.perf_counter())  # the last frame is never throttled away: it says all seeds ran
        else:
            self._maybe_draw()

    def line(self, width: int | None = None) -> str:
        width = width or shutil.get_terminal_size((80, 24)).columns
        elapsed = time.perf_counter() - self.start
        filled = round(BAR_WIDTH * self.done / self.total)
        bar = "█" * filled + "·" * (BAR_WIDTH - filled)
        eta = f" eta {_clock(elapsed / self.done * (self.total - self.done))}" if 0 < self.done < self.total else ""
        text = f"{self.label} {self.done}/{self.total} |{bar}| {_clock(elapsed)}{eta}"
        if self.current:
            text += f" · {self.current}"
        return text[: max(width - 1, 10)]

    def _maybe_draw(self) -> None:
        if not self.active:
            return
        now = time.perf_counter()
        if now - self.start < self.delay or now - self._last_draw < INTERVAL:
            return
        self._draw(now)

    def _draw(self, now: float) -> None:
        self.stream.write("\r\x1b[2K" + self.line())
        self.stream.flush()
        self._last_draw, self.visible = now, True

    def clear(self) -> None:
        """Erase the bar before other output goes to the same terminal; the next update redraws it."""
        if self.active and self.visible:
            self.stream.write("\r\x1b[2K")
            self.stream.flush()
            self._last_draw, self.visible = 0.0, False

    def close(self) -> None:
        """The final state on its own line, if the bar is on screen."""
        if self.active and self.visible:
            self.current = ""
            self._draw(time.perf_counter())
            self.stream.write("\n")
            self.stream.flush()
        self.active = False
