"""attnlab's locks between processes: a file locked with flock, never followed through a link, and
given up after a timeout with one line naming the process that holds it.

Locks that are not in a folder of the user's own (one per MLflow store) live in a private folder
(0700, owned by the user): in the shared temp folder a predictable name let another user plant a
link that attnlab followed, or hold the lock forever.
"""

from __future__ import annotations

import os
import stat
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType

from attnlab.errors import UserError

TIMEOUT_ENV = "ATTNLAB_LOCK_TIMEOUT_S"
DEFAULT_TIMEOUT_S = 300.0  # a store's creation or an experiment's takes seconds; minutes mean a stuck holder
POLL_S = 0.1


def private_dir() -> Path:
    """The user's own folder for attnlab's locks: $XDG_RUNTIME_DIR/attnlab, else <temp>/attnlab-<uid>;
    created 0700, and refused in one line if it is a link, another user's, or open to others."""
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    uid = os.getuid() if hasattr(os, "getuid") else 0
    folder = Path(runtime) / "attnlab" if runtime else Path(tempfile.gettempdir()) / f"attnlab-{uid}"
    try:
        folder.mkdir(mode=0o700, exist_ok=True)
        info = folder.lstat()
    except OSError as exc:
        raise UserError(f"{folder}: cannot make attnlab's private folder for locks: {exc.strerror or exc}") from None
    if stat.S_ISLNK(info.st_mode) or not stat.S_ISDIR(info.st_mode):
        raise UserError(f"{folder}: attnlab's folder for locks is not a folder (a link?); remove it and run again")
    if hasattr(os, "getuid") and (info.st_uid != uid or info.st_mode & 0o077):
        raise UserError(f"{folder}: attnlab's folder for locks is another user's or open to others "
                        f"(mode {stat.S_IMODE(info.st_mode):o}); it must be yours with mode 700")
    return folder


def timeout_s() -> float:
    try:
        return float(os.environ.get(TIMEOUT_ENV, DEFAULT_TIMEOUT_S))
    except ValueError:
        raise UserError(f"{TIMEOUT_ENV}={os.environ[TIMEOUT_ENV]}: must be a number of seconds") from None


@contextmanager
def locked(path: Path, what: str) -> Iterator[None]:
    """Hold an exclusive lock on `path` (`what`: what it guards, for the message) between processes
    where flock exists; the file is opened without following a link and records its holder."""
    try:
        import fcntl
    except ImportError:  # Windows: no lock; the callers' retries cover stores that refuse duplicates
        yield
        return
    flags = os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags, 0o600)
    except OSError as exc:
        raise UserError(f"{path}: cannot open the lock of {what}: {exc.strerror or exc}") from None
    try:
        _acquire(fd, path, what, fcntl)
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()} {' '.join(sys.argv)[:200]}\n".encode("utf-8", "replace"))
        try:
            yield
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


def _acquire(fd: int, path: Path, what: str, fcntl: ModuleType) -> None:  # the module, imported where it exists
    deadline = time.monotonic() + timeout_s()
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            if time.monotonic() >= deadline:
                text = os.pread(fd, 300, 0).decode("utf-8", "replace").strip() or "an unknown process"
                holder = "".join(c if c.isprintable() else "?" for c in text)  # another's text: never a terminal's control
                raise UserError(f"{path}: the lock of {what} is held by pid {holder} for more than "
                                f"{timeout_s():g} s; end that process or raise {TIMEOUT_ENV}") from None
            time.sleep(POLL_S)


__all__ = ["locked", "private_dir"]
