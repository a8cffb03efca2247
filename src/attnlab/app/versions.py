"""`attnlab --version`: read from the installed packages' metadata, so it answers without importing
torch or Hydra (which cost seconds)."""

from __future__ import annotations

from importlib import metadata


def versions() -> str:
    """`attnlab X (torch Y, hydra-core Z)`: the versions a bug report needs."""
    return f"attnlab {metadata.version('attnlab')} (torch {metadata.version('torch')}, hydra-core {metadata.version('hydra-core')})"
