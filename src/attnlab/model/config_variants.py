"""A variant whose constructor takes a model config (Hugging Face's `LlamaAttention(config, layer_idx)`,
nanoGPT's `CausalSelfAttention(config)`), inside a model: built from the model's own config, called
as the layer was called (mask, position embeddings), holding the layer's parameters.

`variant.params.attn_implementation=sdpa` sets the copy's `_attn_implementation` (Hugging Face reads
it at each forward); any other `variant.params.NAME` sets an attribute the config has.
"""

from __future__ import annotations

import copy
import inspect
from typing import Any

from torch import nn

from attnlab.errors import UserError
from attnlab.modules.built import PluginError
from attnlab.modules.configs import ConfigConstructor, Constructor, module_class
from attnlab.modules.hf import build_attention, transformers_class
from attnlab.modules.layouts import Projections, load_projections
from attnlab.modules.roles import manual_seed

IMPLEMENTATION = "attn_implementation"
OWN = "own:"  # a variant name for the layer's own class, re-run through attnlab: own:LlamaAttention


def is_own(name: str) -> bool:
    return name.startswith(OWN)


def own_name(module: nn.Module) -> str:
    return f"{OWN}{type(module).__name__}"


def takes_config(cls: Constructor) -> bool:
    """A constructor whose first parameter is a config object (named `config`), wrapped for a run
    outside a model (attnlab.modules.configs) or not."""
    if isinstance(cls, ConfigConstructor):
        return True
    try:
        first = next(iter(inspect.signature(module_class(cls)).parameters), None)
    except (TypeError, ValueError):
        return False
    return first == "config"


def _built(cls: type[nn.Module], config: Any, layer: int) -> nn.Module:
    """A transformers class as its family builds it; any other `Cls(config)` as its signature says."""
    if transformers_class(cls) is not None:
        return build_attention(cls, config, layer, in_model=True)
    kwargs = {"layer_idx": layer} if "layer_idx" in inspect.signature(cls).parameters else {}
    return cls(config, **kwargs)


def config_variant(cls: Constructor, config: Any, params: dict[str, Any], own: nn.Module, layer: int,
                   projections: Projections, num_heads: int, seed: int) -> tuple[nn.Module, dict[str, str]]:
    """The variant built from a copy of the model's config, with the layer's parameters: the layer's
    own state_dict when the variant is the layer's class, else through attnlab's layouts."""
    cls, config = module_class(cls), copy.deepcopy(config)
    for key, value in params.items():
        if key == IMPLEMENTATION:
            config._attn_implementation = value
        elif hasattr(config, key):
            setattr(config, key, value)
        else:
            raise UserError(f"variant.params.{key}: not an attribute of {type(config).__name__}")
    manual_seed(seed)
    try:
        module = _built(cls, config, layer)
    except Exception as exc:  # noqa: BLE001 - the plugin's constructor: fails its record only
        raise PluginError(f"{cls.__name__}(config) could not be built: {type(exc).__name__}: {exc}") from exc
    if type(module) is type(own) or set(module.state_dict()) == set(own.state_dict()):
        module.load_state_dict(own.state_dict())
        return module.eval(), {name: "the layer's own" for name in own.state_dict()}
    return module.eval(), load_projections(module, projections, num_heads=num_heads)
