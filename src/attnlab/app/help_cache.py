"""`attnlab --help` without importing torch, once it has been printed: the text is kept in attnlab's
cache under a key of everything it is made from, and printed from there while none of it changed.

Why: the help lists every variant with its constructor, read from the plugin files, which import
torch (seconds on a busy machine) before a word is printed. What the text is made from: attnlab's
own files (its code, its configs, the built-in plugins), the working folder's ./plugins and ./conf,
the folders on ATTNLAB_PLUGIN_PATH, installed plugins (entry points), Hydra's and OmegaConf's
versions and the Python running it; each file by its path, size and modification time. Only a bare
`--help` (or `-h`) is kept: with overrides the text may depend on them.
"""

from __future__ import annotations

import hashlib
import os
import sys
from collections.abc import Iterator
from importlib import metadata
from pathlib import Path

from attnlab.plugin_folders import PLUGIN_PATH_ENV, plugin_dirs

HELP_ARGS = (["--help"], ["-h"])
CACHE_ENV = "ATTNLAB_CACHE_DIR"  # as attnlab.modules.import_probe's
ENTRY_POINT_GROUP = "attnlab.variants"  # attnlab.modules.discovery's


def cached_help(args: list[str]) -> str | None:
    """The help text kept for this state of every file it is made from; None: not kept (or not a bare --help)."""
    if args not in HELP_ARGS:
        return None
    try:
        return _file().read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return None


def keep_help(args: list[str], text: str) -> None:
    """Keep `text`, the help a bare --help printed; a cache that cannot be written is no error."""
    if args not in HELP_ARGS or not text:
        return
    try:
        path = _file()
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        partial.write_text(text, encoding="utf-8")
        os.replace(partial, path)
    except OSError:
        pass


def _file() -> Path:
    root = Path(os.environ.get(CACHE_ENV) or Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "attnlab")
    return root / "help" / _key()


def _key() -> str:
    digest = hashlib.sha256()
    for part in _parts():
        digest.update(part.encode("utf-8", "surrogatepass") + b"\0")
    return digest.hexdigest()[:32]


def _parts() -> Iterator[str]:
    yield sys.executable
    yield sys.version
    yield os.environ.get(PLUGIN_PATH_ENV, "")
    for distribution in ("hydra-core", "omegaconf"):
        try:
            yield metadata.version(distribution)
        except metadata.PackageNotFoundError:
            yield ""
    yield from sorted(f"{e.name}={e.value}" for e in metadata.entry_points(group=ENTRY_POINT_GROUP))
    package = Path(__file__).resolve().parents[1]
    for folder in [package, *plugin_dirs(), Path.cwd() / "conf"]:
        yield from _stats(folder)


def _stats(folder: Path) -> Iterator[str]:
    """Each file under `folder`: its path, size and modification time (caches and hidden files aside)."""
    if not folder.is_dir():
        return
    for parent, folders, files in os.walk(folder):
        folders[:] = sorted(f for f in folders if f != "__pycache__" and not f.startswith("."))
        for name in sorted(files):
            path = os.path.join(parent, name)
            try:
                stat = os.stat(path)
            except OSError:
                continue
            yield f"{path}:{stat.st_size}:{stat.st_mtime_ns}"
