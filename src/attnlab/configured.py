"""Objects built from their config node (`_target_` and keyword values), the config resolved once.

Why not `hydra.utils.instantiate`: it resolves a copy of the node and then resolves the result
again, so an escaped `\\${oc.env:VAR}` in a user's text (meant literally) became a live
interpolation and was read from the environment. Here the node becomes plain data first and the
factory gets exactly those values.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, cast

from omegaconf import DictConfig, OmegaConf

HYDRA_FLAGS = ("_convert_", "_recursive_")  # instantiate's switches: plain data needs neither


def factory(node: DictConfig) -> Callable[..., Any]:
    """The callable a node's `_target_` names (a user's plugin folders on the import path)."""
    from hydra.utils import get_method

    from attnlab.plugin_folders import importable_plugins

    importable_plugins()
    return get_method(str(node._target_))


def plain_values(node: DictConfig) -> dict[str, Any]:
    """The node's keyword values, resolved once, without `_target_` and instantiate's switches."""
    values = container(node)
    return {key: value for key, value in values.items() if key != "_target_" and key not in HYDRA_FLAGS}


def container(node: DictConfig, *, enum_to_str: bool = False) -> dict[str, Any]:
    """The node as plain resolved containers; typed as the dict a DictConfig becomes (OmegaConf's
    return type also covers lists, strings and None, for other nodes)."""
    return cast(dict[str, Any], OmegaConf.to_container(node, resolve=True, enum_to_str=enum_to_str))


def build(node: DictConfig, **extra: Any) -> Any:
    """Call the node's factory with its plain values and `extra`; its own exceptions propagate."""
    return factory(node)(**plain_values(node), **extra)
