"""The command's standard streams, made usable before anything runs.

Started with stdout or stderr closed (`... >&- 2>&-`, as some schedulers and daemons run it), Python
sets sys.stdout to None, and the next file attnlab opened took descriptor 1: a print could have
written into a record. Each closed descriptor 0-2 is opened on the null device first, so output
goes nowhere and the records are written as usual.
"""

from __future__ import annotations

import fcntl
import os
import sys

STREAMS = ((0, "stdin", "r"), (1, "stdout", "w"), (2, "stderr", "w"))


def ensure_std_streams() -> None:
    for fd, name, mode in STREAMS:
        if not _usable(fd, mode):
            null = os.open(os.devnull, os.O_RDWR)
            if null != fd:  # the lowest free descriptor: fd itself, unless a lower one was closed too
                os.dup2(null, fd)
                os.close(null)
        if getattr(sys, name) is None:
            setattr(sys, name, open(fd, mode, encoding="utf-8", errors="backslashreplace", closefd=False))


def _usable(fd: int, mode: str) -> bool:
    """Open, and open for `mode`: a descriptor closed at the start may since hold a file opened
    read-only (multiprocessing opens the null device for stdin on the lowest free descriptor)."""
    try:
        access = fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_ACCMODE
    except OSError:
        return False
    return access == os.O_RDWR or access == (os.O_RDONLY if mode == "r" else os.O_WRONLY)
