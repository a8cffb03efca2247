"""Objects built from their config's plain values (`_target_` and keyword values), which the app
resolved once (attnlab.app.config_values.container).

Why not `hydra.utils.instantiate`: it resolves a copy of the node and then resolves the result
again, so an escaped `\\${oc.env:VAR}` in a user's text (meant literally) became a live
interpolation and was read from the environment. Here the node is plain data already and the
factory gets exactly those values.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

HYDRA_FLAGS = ("_convert_", "_recursive_")  # instantiate's switches: plain data needs neither


def factory(values: Mapping[str, Any]) -> Callable[..., Any]:
    """The callable the values' `_target_` names (a user's plugin folders on the import path)."""
    from hydra.utils import get_method

    from attnlab.plugin_folders import importable_plugins

    importable_plugins()
    return get_method(str(values["_target_"]))


def plain_values(values: Mapping[str, Any]) -> dict[str, Any]:
    """The keyword values, without `_target_` and instantiate's switches."""
    return {key: value for key, value in values.items() if key != "_target_" and key not in HYDRA_FLAGS}


def build(values: Mapping[str, Any], **extra: Any) -> Any:
    """Call the values' factory with the rest of them and `extra`; its own exceptions propagate."""
    return factory(values)(**plain_values(values), **extra)
