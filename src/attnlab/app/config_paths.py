"""Where attnlab's configs live: its own conf/ folder and ./conf in the working folder, which joins
Hydra's config search path."""

from __future__ import annotations

from importlib import resources
from pathlib import Path

USER_CONFIG = "conf"  # ./conf in the working folder joins Hydra's config search path


def config_dir() -> Path:
    return Path(str(resources.files("attnlab.conf")))


def user_config_dir() -> Path | None:
    """./conf in the working folder, unless it is attnlab's own (running from a clone)."""
    folder = Path.cwd() / USER_CONFIG
    return folder if folder.is_dir() and folder.resolve() != config_dir().resolve() else None


def user_config_searchpath() -> list[str]:
    """`hydra.searchpath` (a resolver: an entry for a folder that does not exist makes Hydra warn)."""
    folder = user_config_dir()
    return [f"file://{folder}"] if folder is not None else []


def group_options(group: str) -> tuple[list[str], list[str]]:
    """(attnlab's options, the working folder's) of a config group: its YAML files."""
    builtin = sorted(p.stem for p in (config_dir() / group).glob("*.yaml"))
    folder = user_config_dir()
    own = sorted({p.stem for p in (folder / group).glob("*.yaml")} - set(builtin)) if folder is not None else []
    return builtin, own
