"""How a path is shown to the user: as they would type it from the working folder."""

from __future__ import annotations

import os
from pathlib import Path


def display_path(path: Path | str | None) -> str:
    """`path` relative to the working folder when it is inside it (as a user typed it), else absolute."""
    if path is None:
        return ""
    absolute = Path(os.path.abspath(path))
    try:
        return str(absolute.relative_to(Path.cwd()))
    except ValueError:
        return str(absolute)
