"""Parameters a transformers attention class creates empty (`nn.Parameter(torch.empty(...))`,
TimesFM's per-dimension query scaling; `torch.FloatTensor(...)`, XLNet's) and leaves to its model's `_init_weights`: given the values
that model gives them, never whatever the memory held (1e33 on one run, 0 on the next)."""

from __future__ import annotations

import ast
import copy
import inspect
import sys
import textwrap
from typing import TYPE_CHECKING

import torch
from torch import nn

from attnlab.modules.class_cache import per_class
from attnlab.modules.hf_lineage import transformers_class

if TYPE_CHECKING:  # for its type only: attnlab imports transformers on first use
    from transformers import PreTrainedModel


def initialised(module: nn.Module) -> nn.Module:
    """`module` with the empty-created parameters of it and its submodules (JetMoE's experts inside
    its attention) set as its model's `_init_weights` sets them; the others (the projections attnlab
    shares with the reference) untouched."""
    pretrained = _pretrained_class(type(module))
    config = getattr(module, "config", None)
    if pretrained is None or config is None:
        return module
    shell = pretrained.__new__(pretrained)  # its _init_weights reads self.config only: no model is built
    nn.Module.__init__(shell)
    shell.config = config
    for part in module.modules():
        names = [name for name in _empty_parameters(type(part)) if isinstance(getattr(part, name, None), nn.Parameter)]
        if names:
            _initialise(shell, part, names)
    return module


def _initialise(shell: PreTrainedModel, part: nn.Module, names: list[str]) -> None:
    fresh = copy.deepcopy(part)
    try:
        with torch.no_grad():
            shell._init_weights(fresh)
    except Exception:  # noqa: BLE001 - a model whose initialisation needs more than its config: left as built
        return
    with torch.no_grad():
        for name in names:
            getattr(part, name).copy_(getattr(fresh, name))


@per_class
def _empty_parameters(cls: type) -> tuple[str, ...]:
    """The attributes `self.NAME = nn.Parameter(torch.empty(...))` of the class's (and its bases') `__init__`."""
    found: list[str] = []
    for klass in cls.__mro__:
        if not klass.__module__.startswith("transformers.models.") or "__init__" not in vars(klass):
            continue  # torch's and transformers' shared layers (nn.Linear, GPT-2's Conv1D) initialise their own
        try:  # the class's own source: a decorator may wrap its __init__ (TimesFM 2.5's use_kernelized_func)
            tree = ast.parse(textwrap.dedent(inspect.getsource(klass)))
        except (TypeError, OSError, SyntaxError):
            continue
        if not isinstance(klass_def := tree.body[0], ast.ClassDef):
            continue
        inits = [n for n in klass_def.body if isinstance(n, ast.FunctionDef) and n.name == "__init__"]
        nodes = [n for init in inits for n in ast.walk(init)]
        used = [n.attr for n in nodes if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id == "self"]
        for node in nodes:
            if (isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(target := node.targets[0], ast.Attribute)
                    and isinstance(target.value, ast.Name) and target.value.id == "self" and _empty(node.value)
                    and used.count(target.attr) == 1):  # never filled later in the constructor
                found.append(target.attr)
    return tuple(dict.fromkeys(found))


_UNFILLED = ("empty", "Tensor", "FloatTensor")  # torch's constructors of a size that leave its memory as it was


def _empty(node: ast.expr) -> bool:
    """`nn.Parameter(torch.empty(...))`, or of the legacy `torch.FloatTensor(...)` (XLNet's q, k, v)."""
    return (isinstance(node, ast.Call) and _named(node.func, "Parameter") and bool(node.args)
            and isinstance(node.args[0], ast.Call) and any(_named(node.args[0].func, name) for name in _UNFILLED))


def _named(func: ast.expr, name: str) -> bool:
    return (isinstance(func, ast.Attribute) and func.attr == name) or (isinstance(func, ast.Name) and func.id == name)


def _pretrained_class(cls: type) -> type[PreTrainedModel] | None:
    """The `PreTrainedModel` of the class's modeling file that defines `_init_weights` (its model's);
    for a copy that subclasses a transformers class (a planted mistake), that class's file."""
    modeling = sys.modules.get((transformers_class(cls) or cls).__module__)
    if "transformers" not in sys.modules or modeling is None:
        return None
    from transformers import PreTrainedModel  # imported already (the class's modeling file did)

    found = [obj for obj in vars(modeling).values() if inspect.isclass(obj) and obj.__module__ == modeling.__name__
             and issubclass(obj, PreTrainedModel) and "_init_weights" in vars(obj)]
    return found[0] if found else None
