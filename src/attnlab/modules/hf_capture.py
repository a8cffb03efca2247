"""An attention class built with the exact arguments its model passes it, where its model's
construction code cannot be evaluated alone (`hf_build`: a positional argument from code attnlab
cannot run, a value per layer, a class its model builds from another sub-config than the type's).

The owning model (transformers' own model class of the modeling file, of the config or of a
composite holding it) is built small on the meta device with the class's `__init__` intercepted:
the arguments the model passes the instance of the layer asked for (configs, sub-configs, ints,
layer ids) are captured, the build stops there, and the class is built again, for real, from them.
So the class is built exactly as its model builds it, whatever its code.
"""

from __future__ import annotations

import copy
import inspect
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from attnlab.modules import hf_small
from attnlab.modules.configs import prefixed_sizes
from attnlab.modules.families import spellings

_LAYER_KEYWORDS = ("layer_idx", "layer_id", "layer_index", "layer_number", "block_idx")
_OWNERS = 2  # of a modeling file's model classes for a config, the first ones tried


class _Captured(Exception):
    """Raised by the intercepted `__init__`: the arguments are captured, the rest of the model is not needed."""


class NotCaptured(LookupError):
    """No model of the modeling file could be built up to the class: why, for each one tried."""


@dataclass(frozen=True)
class Captured:
    """The arguments `model` passes the class, positional and keyword."""

    model: str
    args: tuple[Any, ...]
    kwargs: dict[str, Any]


def captured(cls: type[nn.Module], config: Any, layer: int = 0, sizes: dict[str, Any] | None = None) -> Captured:
    """The arguments the owning model passes `cls` for its layer `layer`, its configs copies of
    `config` (or of a composite holding it) as the model has read them (LED's window made one per
    layer); `sizes` (attnlab's d_in, d_out, num_heads) fill a sub-config the model builds the class
    from that attnlab did not (SAM's mask decoder's, beside the prompt encoder's it filled).
    NotCaptured where no model of its modeling file builds it, naming each model's own error."""
    problems: list[str] = []
    for model_cls, model_config in _owners(cls, config, sizes or {}):
        try:  # its own size: the build stops at the class, and what the model builds before it is on meta
            found = _intercepted(cls, model_cls, hf_small.shrunk(model_config, layer, 0), layer)
        except Exception as exc:  # noqa: BLE001 - a model its config cannot build: the next owner
            problems.append(f"{model_cls.__name__}: {type(exc).__name__}: {' '.join(str(exc).split())}"[:160])
            continue
        if found is not None:
            return Captured(model_cls.__name__, *found)
        problems.append(f"{model_cls.__name__} builds no {cls.__name__} at layer {layer}")
    raise NotCaptured("; ".join(problems))


def _intercepted(cls: type[nn.Module], model_cls: type, config: Any, layer: int) -> tuple[tuple[Any, ...], dict[str, Any]] | None:
    """The arguments of the model's instance of `cls` at `layer` (by a layer keyword it is passed,
    else its layer-th), the model built on the meta device only up to it."""
    calls: list[tuple[tuple[Any, ...], dict[str, Any]]] = []
    own = cls.__dict__.get("__init__")

    def init(self: nn.Module, *args: Any, **kwargs: Any) -> None:
        if type(self) is cls:  # a subclass of it the model builds (another tower's) is not the class asked for
            calls.append((args, kwargs))
            if _at_layer(args, kwargs, layer, len(calls) - 1):
                raise _Captured
        if own is not None:
            own(self, *args, **kwargs)
        else:  # its base's, bound: `self` is not passed twice
            super(cls, self).__init__(*args, **kwargs)

    cls.__init__ = init  # type: ignore[method-assign]  # patched for this one build, restored below
    try:
        with torch.device("meta"):
            model_cls(config)
    except _Captured:
        return calls[-1]
    finally:
        if own is None:
            del cls.__init__
        else:
            cls.__init__ = own  # type: ignore[method-assign]
    return calls[0] if calls and not layer else None


def _at_layer(args: tuple[Any, ...], kwargs: dict[str, Any], layer: int, count: int) -> bool:
    named = [v for k, v in kwargs.items() if k in _LAYER_KEYWORDS and isinstance(v, int)]
    if named:
        return named[0] == layer
    return count == layer


def _owners(cls: type, config: Any, sizes: dict[str, Any]) -> Iterator[tuple[type, Any]]:
    """(model class, its config): the models built from the config's own class, then those of a
    composite whose sub-config it is (its other sub-configs at attnlab's sizes too)."""
    from transformers import PretrainedConfig, PreTrainedModel

    modeling = sys.modules[cls.__module__]
    models = sorted((c for c in vars(modeling).values() if inspect.isclass(c) and issubclass(c, PreTrainedModel)
                     and c.__module__ == modeling.__name__ and "PreTrained" not in c.__name__),
                    key=lambda c: (not c.__name__.endswith("Model"), len(c.__name__)))
    own = [m for m in models if m.config_class is type(config)][:_OWNERS]
    implementation = getattr(config, "_attn_implementation", None) or "eager"
    for model_cls in own:
        yield model_cls, _sized_alike(config, sizes, implementation, top=False)
    seen: set[type] = set()
    for model_cls in models:
        parent_cls = model_cls.config_class
        keys = [k for k, sub in (getattr(parent_cls, "sub_configs", None) or {}).items() if sub is type(config)]
        if parent_cls is None or not keys or parent_cls in seen or model_cls in own:  # None: keys is [] too
            continue
        seen.add(parent_cls)
        try:
            parent = _built_at(parent_cls, sizes)
        except Exception:  # noqa: BLE001 - a composite that cannot be built bare: not an owner attnlab can build
            continue
        if isinstance(parent, PretrainedConfig):  # attnlab's config in it as attnlab filled it, the others sized alike
            parent = _sized_alike(parent, sizes, implementation)
            setattr(parent, keys[0], _sized_alike(config, sizes, implementation, top=False))
            yield model_cls, parent


def _built_at(parent_cls: type, sizes: dict[str, Any]) -> Any:
    """A composite config built with attnlab's sizes under the spellings its bare build holds as ints, so
    what it derives from them in its own construction (Sapiens 2's key/value heads per layer, from its
    heads) is derived from attnlab's; the bare build where that construction refuses them."""
    bare = parent_cls()
    sized = _sized_alike(bare, sizes, getattr(bare, "_attn_implementation", None) or "eager")
    given = {k: v for k, v in vars(sized).items() if type(v) is int and vars(bare).get(k) != v}
    try:
        return parent_cls(**given) if given else bare
    except Exception:  # noqa: BLE001 - a construction that checks its sizes against others attnlab did not set
        return bare


def _sized_alike(config: Any, sizes: dict[str, Any], implementation: str, top: bool = True) -> Any:
    """A copy of `config` whose sub-configs (and itself, where `top`: a composite attnlab did not
    fill) hold attnlab's sizes under every spelling of each they hold as an int (the class may be
    built from any of them) and the run's attention implementation: the class built says what
    attnlab sized, and runs the kernel asked for."""
    from transformers import PretrainedConfig

    config = copy.deepcopy(config)
    heads, width = sizes.get("num_heads"), sizes.get("d_out")
    values = {"d_in": sizes.get("d_in"), "num_heads": heads, "num_kv_heads": heads,
              "head_dim": width // heads if width and heads else None}
    for sub in [config] * top + _subconfigs(config, PretrainedConfig):
        sub._attn_implementation = implementation
        if getattr(sub, "is_heterogeneous", False):  # its sizes held globally, as attnlab's own config (`hf`)
            sub.allow_global_per_layer_attribute_access = True
        prefixed = prefixed_sizes(sub)  # a tower's own heads (DETR's decoder_attention_heads), its hidden width
        for key, value in values.items():
            held = [s for s in spellings(key) if type(_held(sub, s)) is int] + prefixed.get(key, [])
            for spelling in held if value is not None else ():
                setattr(sub, spelling, value)
    return config


def _held(config: Any, name: str) -> Any:
    try:
        return getattr(config, name, None)
    except Exception:  # noqa: BLE001 - a per-layer attribute its config refuses to read globally (Gemma 4's head_dim)
        return None


def _subconfigs(config: Any, base: type) -> list[Any]:
    found = [v for v in vars(config).values() if isinstance(v, base)]
    return [s for v in found for s in (v, *_subconfigs(v, base))]
