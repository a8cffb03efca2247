"""Where plugins live: attnlab's built-ins, ./plugins in the working folder, and every folder on
`ATTNLAB_PLUGIN_PATH`. Variants, sinks and inputs factories are all found here.

The built-ins sit in one folder per group (variants, modern, implementations, mistakes), whose
`__init__.py` docstring is the group's heading in `--help`; a user's folder is read flat and its
plugins are the group `yours`.
"""

from __future__ import annotations

import ast
import os
import stat
import sys
from importlib import resources
from pathlib import Path

PLUGIN_PATH_ENV = "ATTNLAB_PLUGIN_PATH"
USER_GROUP = "yours"


def builtin_plugin_dir() -> Path:
    return Path(str(resources.files("attnlab.plugins")))


def plugin_dirs() -> list[Path]:
    dirs = [builtin_plugin_dir(), Path.cwd() / "plugins"]
    dirs += [Path(p) for p in os.environ.get(PLUGIN_PATH_ENV, "").split(os.pathsep) if p]
    unique: list[Path] = []
    for folder in dirs:
        if folder.is_dir() and folder.resolve() not in [u.resolve() for u in unique]:
            unique.append(folder)
    return unique


def builtin_groups() -> list[str]:
    """The built-ins' groups, in the order `--help` shows them (what a user runs first, the zoo last)."""
    order = ("variants", "modern", "implementations", "mistakes")
    found = [p.name for p in builtin_plugin_dir().iterdir() if p.is_dir() and (p / "__init__.py").is_file()]
    return sorted(found, key=lambda name: (order.index(name) if name in order else len(order), name))


def group_heading(group: str) -> str:
    """The first line of a built-in group folder's `__init__.py` docstring (read, not imported)."""
    init = builtin_plugin_dir() / group / "__init__.py"
    doc = ast.get_docstring(ast.parse(init.read_text())) if init.is_file() else None
    return doc.splitlines()[0].strip() if doc else "./plugins, ATTNLAB_PLUGIN_PATH and installed entry points"


def plugin_files(skipped: list[str] | None = None) -> list[tuple[Path, str]]:
    """Every plugin file with its group, folder by folder: the built-ins' group folders, then each
    user folder (flat). Files whose name starts with `_` are not plugins (a sibling may import them).
    Only regular files are read: a FIFO named `x.py` hung every command and a folder or a dangling
    link named so was a traceback; each is skipped, with a line in `skipped`."""
    builtin = builtin_plugin_dir()
    files: list[tuple[Path, str]] = []
    for folder in plugin_dirs():
        if folder.resolve() == builtin.resolve():
            files += [(path, group) for group in builtin_groups() for path in sorted((folder / group).glob("*.py"))]
        else:
            files += [(path, USER_GROUP) for path in sorted(folder.glob("*.py"))]
    plugins = []
    for path, group in files:
        if path.name.startswith("_"):
            continue
        why = _not_a_file(path)
        if why is None:
            plugins.append((path, group))
        elif skipped is not None:
            skipped.append(f"plugin {_shown(path)} skipped: {why}, not a file")
    return plugins


def python_files(folder: Path) -> list[Path]:
    """The regular `*.py` files of a folder, sorted (what a folder's plugins may import by name)."""
    return [path for path in sorted(folder.glob("*.py")) if _not_a_file(path) is None]


def _not_a_file(path: Path) -> str | None:
    """What `path` is when it is not a regular file (a link is followed: a link to a file is one)."""
    try:
        mode = path.stat().st_mode
    except OSError:
        return "a dangling link" if path.is_symlink() else "unreadable"
    if stat.S_ISREG(mode):
        return None
    return {stat.S_IFDIR: "a folder", stat.S_IFIFO: "a FIFO", stat.S_IFSOCK: "a socket"}.get(stat.S_IFMT(mode), "a device")


def _shown(path: Path) -> str:
    """A path for the terminal: a control character in a file's name is never sent to it raw."""
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in str(path))


def importable_plugins() -> None:
    """The user's plugin folders (./plugins, ATTNLAB_PLUGIN_PATH) on the import path, after
    everything else: a `_target_: my_sink.MySink` in a conf/ YAML names ./plugins/my_sink.py."""
    builtin = builtin_plugin_dir().resolve()
    for folder in plugin_dirs():
        if folder.resolve() != builtin and str(folder) not in sys.path:
            sys.path.append(str(folder))
