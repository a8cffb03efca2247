"""attnlab: see what a change to self-attention does, stage by stage."""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    # `as NAME`: exported, for a checker that reads no `__all__` built at run time
    from attnlab.app.api import Result as Result
    from attnlab.app.api import run as run
    from attnlab.app.api_sweep import sweep as sweep
    from attnlab.app.api_training import train as train
    from attnlab.capture.recorder import tap as tap
    from attnlab.modules.built import create_variant as create_variant
    from attnlab.modules.discovery import variant as variant
    from attnlab.modules.registry import list_variants as list_variants

# Imported on first use: the `attnlab` command starts its job forkserver before torch is imported
# (attnlab.__main__), and every import of a submodule runs this file first.
_EXPORTS = {
    "Result": "attnlab.app.api", "run": "attnlab.app.api", "sweep": "attnlab.app.api_sweep", "train": "attnlab.app.api_training",
    "tap": "attnlab.capture.recorder",
    "create_variant": "attnlab.modules.built", "variant": "attnlab.modules.discovery",
    "list_variants": "attnlab.modules.registry",
}
__all__ = list(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'attnlab' has no attribute {name!r}")
    return getattr(import_module(_EXPORTS[name]), name)


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
