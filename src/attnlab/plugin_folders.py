"""Where plugins live: attnlab's built-ins, ./plugins in the working folder, and every folder on
`ATTNLAB_PLUGIN_PATH`. Variants, sinks and inputs factories are all found here."""

from __future__ import annotations

import os
import sys
from importlib import resources
from pathlib import Path

PLUGIN_PATH_ENV = "ATTNLAB_PLUGIN_PATH"


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


def importable_plugins() -> None:
    """The user's plugin folders (./plugins, ATTNLAB_PLUGIN_PATH) on the import path, after
    everything else: a `_target_: my_sink.MySink` in a conf/ YAML names ./plugins/my_sink.py."""
    builtin = builtin_plugin_dir().resolve()
    for folder in plugin_dirs():
        if folder.resolve() != builtin and str(folder) not in sys.path:
            sys.path.append(str(folder))
