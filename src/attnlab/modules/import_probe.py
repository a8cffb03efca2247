"""Your plugin files imported first in a child process: one that ends its process at import
(os._exit, a segfault) costs only itself, never the run that discovers it.

Only files of your own folders are probed (the built-ins are trusted) and each once: the verdict is
cached by a hash of the folder's .py files (a plugin may import its siblings), so a run with no
plugins of yours starts no child, and a run with unchanged ones starts none after the first.
"""

from __future__ import annotations

import hashlib
import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

from attnlab.plugin_folders import python_files

CACHE_ENV = "ATTNLAB_CACHE_DIR"
PROBE_TIMEOUT_S = 120
CHILD = "import sys; from attnlab.modules.plugin_import import probe_imports; probe_imports(sys.argv[1], sys.argv[2:])"


def deadly_imports(files: list[Path]) -> dict[Path, str]:
    """{file: why} for the files whose import ends the process importing it."""
    verdicts = {path: _cache_file(path) for path in files}
    dead = {path: cache.read_text() for path, cache in verdicts.items() if cache.is_file() and cache.read_text()}
    todo = [path for path, cache in verdicts.items() if not cache.is_file()]
    while todo:
        finished, why, lasting = _probe(todo)
        for path in finished:
            _remember(verdicts[path], "")
        rest = todo[len(finished):]
        if not rest:
            break
        dead[rest[0]] = why
        if lasting:  # a timeout is this run's: a busy machine's slowness is not the file's
            _remember(verdicts[rest[0]], why)
        todo = rest[1:]
    return dead


def _probe(files: list[Path]) -> tuple[list[Path], str, bool]:
    """The files a child imported in order before it ended, why it ended (when it did early), and
    whether that is the file's own doing (an exit or a signal) rather than time running out."""
    with tempfile.NamedTemporaryFile("r", suffix=".done") as done:
        try:
            rc = subprocess.run([sys.executable, "-c", CHILD, done.name, *map(str, files)], stdin=subprocess.DEVNULL,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=PROBE_TIMEOUT_S).returncode
            why, lasting = _cause(rc), True
        except subprocess.TimeoutExpired:
            why, lasting = f"its import did not finish in {PROBE_TIMEOUT_S} s", False
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
    root = Path(os.environ.get(CACHE_ENV) or Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "attnlab")
    return root / "plugin-imports" / digest.hexdigest()[:32]


def _remember(cache: Path, why: str) -> None:
    try:
        cache.parent.mkdir(parents=True, exist_ok=True)
        partial = cache.with_name(f".{cache.name}.{os.getpid()}.tmp")  # parallel jobs probe the same files
        partial.write_text(why)
        os.replace(partial, cache)
    except OSError:  # a read-only home: probed again next time
        pass
