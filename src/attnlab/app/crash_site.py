"""Where a job's process died: the Python frames Python's faulthandler wrote when native code
crashed under it (a segfault in a kernel says nothing else), as a clause of the job's one-line error.
"""

from __future__ import annotations

import re
from pathlib import Path

FRAME = re.compile(r'^\s*File "(?P<path>[^"]+)", line (?P<line>\d+) in (?P<name>\S+)', re.MULTILINE)


def crash_site(fault_log: str) -> str:
    """`in string_at (ctypes/__init__.py:519), called from forward (plugins/mine.py:5)`: the innermost
    frame and the innermost `forward` (the module the crash came through) when another; "" when the
    log names no frame (the process was killed, not crashed)."""
    frames = [(m["name"], _short(m["path"]), m["line"]) for m in FRAME.finditer(fault_log)]
    if not frames:
        return ""
    name, path, line = frames[0]
    site = f"in {name} ({path}:{line})"
    forward = next((frame for frame in frames[1:] if frame[0] == "forward"), None)
    return site + (f", called from forward ({forward[1]}:{forward[2]})" if forward else "")


def _short(path: str) -> str:
    """A path's last three parts: enough to find the file, short enough for one line."""
    return "/".join(Path(path).parts[-3:])
