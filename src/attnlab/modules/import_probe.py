"""Your plugin files imported first in a child process: one that ends its process at import
(os._exit, a segfault) costs only itself, never the run that discovers it. The child is forked from a
server that imported torch once for the process's life (attnlab.modules.probe_server).

Only files of your own folders are probed (the built-ins are trusted) and each once: the verdict is
cached by a hash of the folder's .py files (a plugin may import its siblings), so a run with no
plugins of yours starts no child, and a run with unchanged ones starts none after the first.
An import that never ends is remembered apart, by the file's path, size and mtime, for a day: a busy
machine's slow import is not refused for ever, and a hung one does not cost every run its wait.
"""

from __future__ import annotations

import hashlib
import os
import signal
import tempfile
import time
from pathlib import Path

from attnlab.modules.probe_server import probe
from attnlab.plugin_folders import python_files

CACHE_ENV = "ATTNLAB_CACHE_DIR"
RETRY_ENV = "ATTNLAB_RETRY_PLUGINS"
PROBE_TIMEOUT_S = 120
HANG_MEMORY_S = 24 * 3600  # how long an import that did not finish is skipped without a probe


def deadly_imports(files: list[Path]) -> dict[Path, str]:
    """{file: why} for the files whose import ends the process importing it, or did not finish."""
    verdicts = {path: _cache_file(path) for path in files}
    dead = {path: cache.read_text() for path, cache in verdicts.items() if cache.is_file() and cache.read_text()}
    hung = {path: why for path in files if path not in dead and not verdicts[path].is_file() and (why := _hung(path))}
    dead |= hung
    todo = [path for path, cache in verdicts.items() if not cache.is_file() and path not in hung]
    while todo:
        finished, why, lasting = _probe(todo)
        for path in finished:
            _remember(verdicts[path], "")
        rest = todo[len(finished):]
        if not rest:
            break
        if lasting:  # an exit or a signal: the file's own doing
            _remember(verdicts[rest[0]], why)
        else:  # time ran out, perhaps on a busy machine: for a day, or until the file changes
            _remember(_hang_file(rest[0]), f"{time.time()}\n{why}")
            why = f"{why}; {_SKIPPED}"
        dead[rest[0]] = why
        todo = rest[1:]
    return dead


_SKIPPED = f"skipped for a day or until the file changes ({RETRY_ENV}=1 retries now)"


def _hung(path: Path) -> str:
    """Why `path` is skipped: its import did not finish within the last day, and it has not changed."""
    if os.environ.get(RETRY_ENV, "").strip() not in ("", "0"):
        return ""
    try:
        stamp, why = _hang_file(path).read_text().split("\n", 1)
        if 0 <= time.time() - float(stamp) < HANG_MEMORY_S:
            return f"{why}; {_SKIPPED}"
    except (OSError, ValueError):  # none remembered, or a cut file: probed again
        pass
    return ""


def _hang_file(path: Path) -> Path:
    """Where a hang of `path` is remembered: keyed by its path, size and mtime, so an edit retries."""
    try:
        state = path.stat()
    except OSError:  # removed meanwhile: a key no other file has
        state = os.stat_result((0,) * 10)
    key = f"{path.resolve()}\0{state.st_size}\0{state.st_mtime_ns}"
    return _cache_root() / "plugin-hangs" / hashlib.sha256(key.encode()).hexdigest()[:32]


def _probe(files: list[Path]) -> tuple[list[Path], str, bool]:
    """The files a child imported in order before it ended, why it ended (when it did early), and
    whether that is the file's own doing (an exit or a signal) rather than time running out."""
    with tempfile.NamedTemporaryFile("r", suffix=".done") as done:
        rc = probe(done.name, list(map(str, files)), PROBE_TIMEOUT_S)
        if rc is None:
            why, lasting = f"its import did not finish in {PROBE_TIMEOUT_S} s", False
        else:
            why, lasting = _cause(rc), True
        finished = done.read().split("\0")[:-1]
    return [Path(p) for p in finished], why, lasting


def _cause(rc: int) -> str:
    if rc < 0:
        name = signal.Signals(-rc).name
        return f"its import killed the process ({name}{', a segfault' if name == 'SIGSEGV' else ''})"
    return f"its import ended the process (exit code {rc}: os._exit)"


def _cache_file(path: Path) -> Path:
    folder = path.parent
    digest = hashlib.sha256(path.name.encode())
    for sibling in python_files(folder):  # never a FIFO's read, which would wait forever
        digest.update(sibling.name.encode() + b"\0" + sibling.read_bytes())
    return _cache_root() / "plugin-imports" / digest.hexdigest()[:32]


def _cache_root() -> Path:
    return Path(os.environ.get(CACHE_ENV) or Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "attnlab")


def _remember(cache: Path, why: str) -> None:
    try:
        cache.parent.mkdir(parents=True, exist_ok=True)
        partial = cache.with_name(f".{cache.name}.{os.getpid()}.tmp")  # parallel jobs probe the same files
        partial.write_text(why)
        os.replace(partial, cache)
    except OSError:  # a read-only home: probed again next time
        pass
