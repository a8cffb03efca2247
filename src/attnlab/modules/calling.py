"""How a module's forward is called and which part of its return is the output.

`module(x)` for the source's classes; a Hugging Face attention module also gets what its model
passes it (`hf.forward_kwargs`: the mask, the rotary (cos, sin), position ids). A returned tuple,
list or model-output object gives the first element that is a (batch, tokens, ·) tensor (or
(tokens, ·) for a 2-D module); `Returned` says what came back and which element was used, and
holds attention weights the module returned beside it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from attnlab.modules import hf


@dataclass(frozen=True)
class Returned:
    """What a forward returned, and the tensor attnlab takes as the module's output."""

    output: Any  # the output tensor, or what came back when no element is one
    what: str  # what forward returned, e.g. "tuple(Tensor (2, 8, 64), Tensor (2, 4, 8, 8))"
    element: str | None = None  # which element is the output ("[0]", ".last_hidden_state"); None: the value itself
    weights: torch.Tensor | None = None  # attention weights returned beside the output: (b, heads, queries, keys)

    @property
    def description(self) -> str:
        """The output's shape, or its type when it is not a tensor."""
        return str(tuple(self.output.shape)) if isinstance(self.output, torch.Tensor) else type(self.output).__name__


def call(module: nn.Module, x: torch.Tensor) -> Returned:
    """The module's forward on `x` as its own code expects to be called."""
    kwargs = hf.forward_kwargs(module, x) if hf.is_hf_module(module) else {}
    return unpack(module(x, **kwargs), x)


def unpack(value: Any, x: torch.Tensor) -> Returned:
    """The output among what forward returned: the value itself when it is a tensor, else the first
    element whose leading dims are the input's (batch, tokens)."""
    if isinstance(value, torch.Tensor) or value is None:
        return Returned(value, _shown(value))
    items = _items(value)
    if not items:
        return Returned(value, type(value).__name__)
    what = f"{type(value).__name__}({', '.join(_shown(v) for _, v in items)})"
    rows = tuple(x.shape[:-1])
    found = next(((k, v) for k, v in items if isinstance(v, torch.Tensor) and tuple(v.shape[:-1]) == rows), None)
    if found is None:
        return Returned(items[0][1], what, items[0][0])
    weights = next((v for k, v in items if k != found[0] and isinstance(v, torch.Tensor) and v.dim() == 4
                    and tuple(v.shape[-2:]) == (rows[-1], rows[-1])), None)
    return Returned(found[1], what, found[0], weights)


def _items(value: Any) -> list[tuple[str, Any]]:
    """(how to reach it, element) for a tuple, list or mapping (a model-output object is one)."""
    if isinstance(value, (tuple, list)):
        return [(f"[{i}]", v) for i, v in enumerate(value)]
    if isinstance(value, dict):
        return [(f".{k}", v) for k, v in value.items()]
    return []


def _shown(value: Any) -> str:
    return f"Tensor {tuple(value.shape)}" if isinstance(value, torch.Tensor) else type(value).__name__
