"""Forward arguments by name: what attnlab passes a module's forward beside `x`.

A forward's first parameter is the input; each other REQUIRED parameter is matched by its name to a
provider (families.PROVIDERS and the self-attention inputs), and a parameter with a default keeps it.
  mask, attn_mask, attention_mask, causal_mask   the causal mask, in the form the parameter suggests:
                     bool (True drops: the book's `masked_fill(mask, -inf)`) unless annotated or
                     defaulted as a float, or spelled `attention_mask` (Hugging Face's additive 4-D)
  cos, sin           the book's compute_rope_params at the module's head_dim, (tokens, head_dim)
  position_embeddings  (cos, sin), (batch, tokens, head_dim) each
  position_ids       0..tokens-1 per batch item
  query, key, value, q, k, v, keys, values, context, key_tensor, value_tensor, to_tensor, key_hidden_states,
  value_hidden_states  the input itself (self-attention: nn.MultiheadAttention's call, MobileBERT's)
  layer_idx          0
  is_causal          True
  alibi, position_bias, residual, cu_seqlens, height, width, ...  a Hugging Face module's only: as its
                     model makes them (modules.hf, modules.hf_inputs)
A required parameter nothing provides is refused before any work (`check_forward`).
"""

from __future__ import annotations

import ast
import inspect
import textwrap
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from attnlab.errors import UserError
from attnlab.modules.class_cache import per_class
from attnlab.modules.families import spellings
from attnlab.modules.roles import declared_count

_MASKS = ("mask", "attn_mask", "attention_mask", "causal_mask")
_SELF = ("query", "key", "value", "q", "k", "v", "keys", "values", "context", "key_tensor", "value_tensor", "to_tensor",
         "key_hidden_states", "value_hidden_states")


class ForwardArgumentError(UserError):
    """A forward parameter attnlab cannot provide."""


def forward_parameters(cls: Any) -> list[inspect.Parameter]:
    """A module class's forward parameters after self, [] when they cannot be read."""
    forward = getattr(cls, "forward", None)
    if not callable(forward):
        return []
    try:
        parameters = list(inspect.signature(forward).parameters.values())
    except (TypeError, ValueError):
        return []
    # read off the class, forward is a plain function whose first parameter is the module, by any name
    bound = inspect.isclass(cls) and not isinstance(inspect.getattr_static(cls, "forward", None), staticmethod)
    return parameters[1:] if parameters and bound else parameters


def required(cls: Any) -> list[inspect.Parameter]:
    """The parameters after the input that have no default (never *args, **kwargs)."""
    named = [p for p in forward_parameters(cls) if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
    return [p for p in named[1:] if p.default is p.empty]


def providable(name: str, extra: tuple[str, ...] = ()) -> bool:
    return name in _MASKS or name in extra or name in _SELF or name in ("cos", "sin", "position_embeddings", "position_ids",
                                                        "layer_idx", "is_causal")


def unmasked_by_default(cls: Any) -> bool:
    """The forward takes a mask only optionally (its default: none) or `is_causal` defaulting to
    False: called as attnlab calls it, with the defaults, it attends both ways."""
    for p in forward_parameters(cls):
        if p.name in _MASKS and p.default is None or p.name == "is_causal" and p.default is False:
            return True
    return False


def check_forward(cls: Any, variant: str, extra: tuple[str, ...] | None = None) -> None:
    """Refuse, before any work, a forward with a required parameter nothing provides (`extra`: what
    the module's model call provides besides, a Hugging Face module's alibi; None: no model call)."""
    missing = [p.name for p in required(cls) if not providable(p.name, extra or ())]
    if missing and extra is not None:  # a library's class: its input comes from its model, not from a default
        raise ForwardArgumentError(
            f"variant '{variant}': {getattr(cls, '__name__', cls)}.forward needs '{missing[0]}', an input its model "
            f"makes from what lies outside the attention, which attnlab does not make up; run a subclass whose "
            f"forward passes {missing[0]}=...")
    if missing:
        raise ForwardArgumentError(
            f"variant '{variant}': forward needs '{missing[0]}', which attnlab cannot provide; give it a default "
            f"or set it in the constructor via variant.params"[:200])


def by_name(module: nn.Module, x: torch.Tensor, given: tuple[str, ...] = ()) -> dict[str, Any]:
    """The required forward parameters after the input, but those `given`, each built by its provider."""
    return {p.name: _provider(p, type(module))(module, x) for p in required(type(module)) if p.name not in given}


def _provider(parameter: inspect.Parameter, cls: type) -> Callable[[nn.Module, torch.Tensor], Any]:
    name = parameter.name
    if name in _MASKS:
        additive = name == "attention_mask" or _float_annotated(parameter) or adds_mask(cls, name)
        return _additive_mask if additive else _bool_mask
    return {"cos": lambda m, x: rope(m, x)[0], "sin": lambda m, x: rope(m, x)[1],
            "position_embeddings": _position_embeddings, "position_ids": _position_ids,
            "layer_idx": lambda m, x: 0, "is_causal": lambda m, x: True, **{s: lambda m, x: x for s in _SELF}}[name]


@per_class
def adds_mask(cls: type[nn.Module], name: str) -> bool:
    """Whether the forward adds its mask `name` to the scores (FSMT's `attn_weights + attn_mask`): a
    float mask, 0 where a query may look and a large negative number where not."""
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(cls.forward)))
    except (TypeError, OSError, SyntaxError):
        return False
    return any(isinstance(n, ast.BinOp) and isinstance(n.op, ast.Add)
               and any(isinstance(side, ast.Name) and side.id == name for side in (n.left, n.right))
               for n in ast.walk(tree))


def _float_annotated(parameter: inspect.Parameter) -> bool:
    text = str(parameter.annotation).lower()
    return "float" in text or isinstance(parameter.default, float)


def _bool_mask(module: nn.Module, x: torch.Tensor) -> torch.Tensor:
    tokens = x.shape[-2]
    return torch.triu(torch.ones(tokens, tokens, dtype=torch.bool, device=x.device), diagonal=1)  # (T, T), True drops


def _additive_mask(module: nn.Module, x: torch.Tensor) -> torch.Tensor:
    drop = _bool_mask(module, x)
    mask = torch.zeros(drop.shape, dtype=x.dtype, device=x.device).masked_fill(drop, torch.finfo(x.dtype).min)
    return mask[None, None]  # (1, 1, T, T)


def head_dim(module: nn.Module) -> int:
    """The module's head size: an attribute under a usual spelling, else its width over its heads."""
    for spelling in spellings("head_dim"):
        value = getattr(module, spelling, None)
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    heads = declared_count(module, "num_heads") or 1
    width = next((p.shape[0] for n, p in module.named_parameters() if n.endswith("weight") and p.dim() == 2), None)
    if width is None:
        raise ForwardArgumentError(f"{type(module).__name__}: forward takes cos/sin but its head_dim is unknown; "
                                   f"give the module a head_dim attribute")
    return width // heads


def rope(module: nn.Module, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The book's compute_rope_params (ch05, Llama 3): half-split angles, (tokens, head_dim) each."""
    dim = head_dim(module)
    base = next((float(getattr(module, s)) for s in spellings("rope_base") if isinstance(getattr(module, s, None), (int, float))
                 and not isinstance(getattr(module, s), bool)), 10_000.0)
    inv_freq = 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.float32)[: dim // 2] / dim))  # (hs / 2,)
    positions = torch.arange(x.shape[-2], dtype=torch.float32)
    angles = positions[:, None] * inv_freq[None, :]  # (T, hs / 2)
    angles = torch.cat([angles, angles], dim=1)  # (T, hs)
    return torch.cos(angles).to(x), torch.sin(angles).to(x)


def _position_embeddings(module: nn.Module, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    cos, sin = rope(module, x)
    batch = x.shape[0] if x.dim() == 3 else 1
    return cos.expand(batch, *cos.shape), sin.expand(batch, *sin.shape)  # (b, T, hs) each


def _position_ids(module: nn.Module, x: torch.Tensor) -> torch.Tensor:
    batch = x.shape[0] if x.dim() == 3 else 1
    return torch.arange(x.shape[-2], device=x.device).expand(batch, x.shape[-2])  # (b, T)
