"""Building a transformers attention class from its config alone, as its model builds it.

What a constructor takes beside the config (GPT-Neo's `attention_type`, LED's `layer_id`, T5's
`has_relative_attention_bias`, an `is_cross_attention` flag) is read from the model's own
construction code: the call of the class in the `__init__` of the layer (or wrapper) that builds
it, its arguments evaluated as that `__init__` would evaluate them, with the config attnlab filled,
the layer index where the model passes its loop's, and the caller's own parameters as its own
caller passes them (`T5Block(config, has_relative_attention_bias=bool(i == 0), layer_idx=i)`).
"""

from __future__ import annotations

import ast
import builtins
import inspect
import sys
from types import ModuleType, SimpleNamespace
from typing import Any

from torch import nn

from attnlab.modules import hf_stage
from attnlab.modules.families import spellings
from attnlab.modules.hf_find import Call, calls_of, self_attention_call
from attnlab.modules.hf_stage import UNKNOWN  # an argument the model computes from what attnlab does not build

_LAYER_NAMES = ("layer_idx", "layer_id", "layer_index", "layer_number", "idx", "i", "layer", "index", "block_idx",
                "stage", "stage_idx", "stage_index")  # a hierarchical model's stage (CvT's)
_CONFIG_NAMES = ("config", "cfg")
_DEPTH = 3  # callers above the class read: a wrapper, its layer, the layer's stack


class _Scope(dict[str, Any]):
    """An `__init__`'s locals for eval: a name it never bound (a loop's index) is the layer index."""

    def __init__(self, modeling: ModuleType, layer: int, values: dict[str, Any]) -> None:
        super().__init__(values)
        self.modeling, self.layer = modeling, layer

    def __missing__(self, name: str) -> Any:
        if name in vars(self.modeling) or hasattr(builtins, name):
            raise KeyError(name)
        return self.layer


def model_arguments(module_cls: type[nn.Module], config: Any, layer: int = 0,
                    tokens: int | None = None) -> tuple[list[Any], dict[str, Any]] | None:
    """(args, kwargs) the model's own code passes `module_cls`, with `config` for its config;
    None where no class of its modeling module builds it. `tokens`: the run's token count, whose
    grid is a window class's window (`hf_stage.windowed`)."""
    modeling = sys.modules[module_cls.__module__]
    call = _call(modeling, module_cls)
    if call is None:
        return None
    layer = hf_stage.stage_of(config, tokens) or layer  # a hierarchical model's stage index is its layers' loop index
    scope = _caller_scope(modeling, call, config, layer, 0)
    args = [config if _is_config(a, call) else _value(a, modeling, scope) for a in call.node.args
            if not isinstance(a, ast.Starred)]
    kwargs = {k.arg: config if _is_config(k.value, call) else _value(k.value, modeling, scope)
              for k in call.node.keywords if k.arg}
    return hf_stage.staged(module_cls, config, args, kwargs, tokens)


def _call(modeling: ModuleType, cls: type) -> Call | None:
    """The call that builds `cls` as a self-attention, a layer's or a block's first."""
    calls = [c for c in calls_of(modeling, cls) if self_attention_call(c)] or calls_of(modeling, cls)
    calls.sort(key=lambda c: not c.caller.__name__.endswith(("Layer", "Block")))
    return calls[0] if calls else None


def _is_config(node: ast.expr, call: Call) -> bool:
    """The caller's config parameter passed on as it is."""
    return isinstance(node, ast.Name) and node.id == _config_parameter(call.init)


def _config_parameter(init: ast.FunctionDef) -> str:
    names = [a.arg for a in init.args.args[1:]]
    # a config-named one, else the first unless it names a size (CvtAttention's num_heads: it takes no config)
    first = names[0] if names and names[0] not in (*spellings("num_heads"), *spellings("d_in")) else "config"
    return next((n for n in names if n in _CONFIG_NAMES), first)


def _caller_scope(modeling: ModuleType, call: Call, config: Any, layer: int, depth: int) -> _Scope:
    """The caller's `__init__` locals at the call: its parameters (config; the layer index; what its
    own caller passes; its defaults), then what its body assigns, `self.x` included."""
    init = call.init
    values: dict[str, Any] = dict(zip(_parameter_names(init), _defaults(init, modeling, layer), strict=True))
    values.update({n: layer for n in values if n in _LAYER_NAMES})
    if depth < _DEPTH:
        outer = _call(modeling, call.caller)
        if outer is not None:
            values.update(_passed(modeling, outer, init, config, layer, depth + 1))
    values[_config_parameter(init)] = config
    scope = _Scope(modeling, layer, values)
    scope["self"] = SimpleNamespace(config=config)
    _run_assignments(init, modeling, scope)
    return scope


def _parameter_names(init: ast.FunctionDef) -> list[str]:
    return [a.arg for a in [*init.args.args[1:], *init.args.kwonlyargs]]


def _defaults(init: ast.FunctionDef, modeling: ModuleType, layer: int) -> list[Any]:
    """Each parameter's default; where it has none, the layer index for a layer's name, else UNKNOWN
    (Swin's stage `num_heads` and `input_resolution`, which a caller above those read passes)."""
    positional = init.args.args[1:]
    padded = [None] * (len(positional) - len(init.args.defaults)) + list(init.args.defaults)
    nodes = [*padded, *init.args.kw_defaults]
    names = _parameter_names(init)
    scope = _Scope(modeling, layer, {})
    return [(layer if name in _LAYER_NAMES else UNKNOWN) if node is None else _value(node, modeling, scope)
            for name, node in zip(names, nodes, strict=True)]


def _passed(modeling: ModuleType, outer: Call, init: ast.FunctionDef, config: Any, layer: int,
            depth: int) -> dict[str, Any]:
    """What the outer caller passes the caller's parameters, evaluated in the outer's scope."""
    scope = _caller_scope(modeling, outer, config, layer, depth)
    names = _parameter_names(init)
    passed = {names[i]: _value(a, modeling, scope) for i, a in enumerate(outer.node.args)
              if i < len(names) and not isinstance(a, ast.Starred)}
    passed.update({k.arg: _value(k.value, modeling, scope) for k in outer.node.keywords if k.arg in names})
    return {k: v for k, v in passed.items() if v is not UNKNOWN}



def _value(node: ast.expr, modeling: ModuleType, scope: _Scope) -> Any:
    """`node` evaluated in the caller's scope; UNKNOWN where it cannot be."""
    try:
        return eval(compile(ast.Expression(node), "<model>", "eval"), {**vars(modeling), **scope}, scope)  # noqa: S307
    except Exception:  # noqa: BLE001 - an expression of the model's that needs what attnlab does not build
        return UNKNOWN


def _run_assignments(init: ast.FunctionDef, modeling: ModuleType, scope: _Scope) -> None:
    """The caller's `x = ...` and `self.x = ...` in source order, skipping any that builds a module
    (a sublayer is not needed to read an argument, and may not build alone)."""
    for node in ast.walk(init):
        if isinstance(node, ast.AnnAssign) and node.value is not None:  # PVT's `hidden_size: int = config...`
            node = ast.Assign(targets=[node.target], value=node.value)
        if not isinstance(node, ast.Assign) or len(node.targets) != 1 or _builds_module(node.value, modeling, scope):
            continue
        value = _value(node.value, modeling, scope)
        if value is UNKNOWN:
            continue
        target = node.targets[0]
        if isinstance(target, ast.Name):
            scope[target.id] = value
        elif isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name) and target.value.id == "self":
            setattr(scope["self"], target.attr, value)


_MODEL_BUILDERS = ("from_config", "_from_config", "from_pretrained")


def _builds_module(node: ast.expr, modeling: ModuleType, scope: _Scope) -> bool:
    for call in (n for n in ast.walk(node) if isinstance(n, ast.Call)):
        if isinstance(call.func, ast.Subscript):
            return True  # a dict of classes (an attention implementation's)
        if isinstance(call.func, ast.Attribute) and call.func.attr in _MODEL_BUILDERS:
            return True  # a sub-model built from its config (Parakeet's encoder): the whole model at its default sizes
        func = _value(call.func, modeling, scope) if isinstance(call.func, (ast.Name, ast.Attribute)) else None
        if inspect.isclass(func) and issubclass(func, nn.Module):
            return True
    return False
