"""The forward inputs a Hugging Face model makes for its attention beyond the mask and the rotary
(cos, sin) (`hf_call.forward_kwargs`), made here as the model makes them, each by its parameter's name:

  residual           zeros: BLOOM adds it after its output projection, so the output is the attention's own
  cu_seqlens         a packed (un-batched) vision tower's sequence bounds, one sequence per batch item:
                     [0, T, 2T, ...]; the module is called on the (b * T, d) rows (`packed`)
  max_seqlen         T, with cu_seqlens
  height, width      a convolutional attention's grid (CvT, PVT, SegFormer): T = height * width,
                     height the largest divisor of T up to sqrt(T) (one token less for a class token)
  output_attentions  False, as the model calls it by default
  a parameter annotated with a mapping class (Gemma 4's `shared_kv_states: KVSharingDict`)
                     an empty one: what the model passes when no layer has shared its keys and values yet
A required input that comes from outside the attention (a drafter's context states, a decoder's
encoder states) is refused in one line naming it (`arguments.check_forward`).
"""

from __future__ import annotations

import ast
import inspect
import math
import textwrap
import weakref
from collections.abc import Callable, MutableMapping
from typing import Any

import torch
from torch import nn

from attnlab.modules.arguments import forward_parameters, required, rope
from attnlab.modules.class_cache import per_class


def _empty_container(parameter: inspect.Parameter) -> type | None:
    """The mapping class a parameter is annotated with (Gemma 4's KVSharingDict), else None."""
    annotation = parameter.annotation
    return annotation if inspect.isclass(annotation) and issubclass(annotation, MutableMapping) else None


@per_class
def padding_mask_only(cls: type) -> bool:
    """Its attention_mask is a key padding mask ((b, T), WavLM's and BridgeTower's into torch's
    `key_padding_mask`, ProphetNet's (b, heads, 1, T)): it drops padded keys only, never the future;
    no padding is None."""
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(cls)))
    except (TypeError, OSError, SyntaxError):
        return False
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "key_padding_mask" for t in node.targets):
            value = node.value
        elif isinstance(node, ast.keyword) and node.arg == "key_padding_mask":
            value = node.value
        else:
            continue
        if any(isinstance(n, ast.Name) and n.id == "attention_mask" for n in ast.walk(value)):
            return True
    return _one_query_row(tree)


def _one_query_row(tree: ast.AST) -> bool:
    """Whether the class checks its attention_mask against a shape with one query row, (b, heads, 1,
    keys) (ProphetNet's encoder attention): the mask is the same for every query, so it pads only."""
    rows = {t.id for node in ast.walk(tree) if isinstance(node, ast.Assign) and isinstance(node.value, ast.Tuple)
            and len(node.value.elts) >= 3 and isinstance(one := node.value.elts[-2], ast.Constant) and one.value == 1
            for t in node.targets if isinstance(t, ast.Name)}
    for node in ast.walk(tree):
        names = {n.id for n in ast.walk(node) if isinstance(n, ast.Name)} if isinstance(node, ast.Compare) else set()
        if "attention_mask" in names and names & rows:
            return True
    return False


def _residual(module: nn.Module, x: torch.Tensor) -> torch.Tensor:
    return torch.zeros_like(x)  # (b, T, d_in): BLOOM's output + 0 is the attention's own


def grid(module: nn.Module, x: torch.Tensor) -> tuple[int, int]:
    """(height, width) of the tokens' grid: a class token (CvT's with_cls_token) is not on it."""
    cells = x.shape[-2] - (1 if getattr(module, "with_cls_token", False) else 0)
    height = max(d for d in range(1, math.isqrt(cells) + 1) if cells % d == 0)
    return height, cells // height


_MADE: dict[str, Callable[[nn.Module, torch.Tensor], Any]] = {
    "residual": _residual,
    "height": lambda m, x: grid(m, x)[0],
    "width": lambda m, x: grid(m, x)[1],
    "output_attentions": lambda m, x: False,
}
PACKED = ("cu_seqlens",)  # a forward taking these is called on un-batched rows


def provided(cls: Any) -> tuple[str, ...]:
    """The required forward parameters of `cls` this module makes (for `arguments.check_forward`)."""
    return tuple(p.name for p in required(cls) if p.name in _MADE or p.name in PACKED or p.name == "max_seqlen"
                 or _empty_container(p) is not None)


def made(module: nn.Module, x: torch.Tensor, given: dict[str, Any]) -> dict[str, Any]:
    """The required forward parameters made here, but those `given`."""
    found: dict[str, Any] = {}
    for p in required(type(module)):
        if p.name in given:
            continue
        if p.name in _MADE:
            found[p.name] = _MADE[p.name](module, x)
        elif (container := _empty_container(p)) is not None:
            found[p.name] = container()
    return found


def packed(module: nn.Module) -> bool:
    """A packed vision tower's attention (Qwen2-VL's): un-batched rows and their sequences' bounds."""
    return any(p.name in PACKED for p in forward_parameters(type(module)))


def packed_call(module: nn.Module, x: torch.Tensor) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """Its arguments on x (b, T, d): the rows (b * T, d), each batch item its own sequence in
    cu_seqlens, rotary (cos, sin) of each row's position in its sequence (the book's RoPE at the
    module's head_dim, a 1-D patch row: the tower's 2-D grid has no meaning for tokens)."""
    batch, tokens = (x.shape[0], x.shape[-2]) if x.dim() == 3 else (1, x.shape[0])
    rows = x.reshape(batch * tokens, x.shape[-1])  # (b * T, d)
    accepted = {p.name for p in forward_parameters(type(module))}
    kwargs: dict[str, Any] = {"cu_seqlens": torch.arange(batch + 1, dtype=torch.int32, device=x.device) * tokens}
    if "max_seqlen" in accepted:
        kwargs["max_seqlen"] = tokens
    cos, sin = rope(module, x)  # (T, hs) each
    if "position_embeddings" in accepted:
        kwargs["position_embeddings"] = (cos.repeat(batch, 1), sin.repeat(batch, 1))  # (b * T, hs) each
    elif "rotary_pos_emb" in accepted:
        half = cos.shape[-1] // 2
        kwargs["rotary_pos_emb"] = torch.atan2(sin, cos)[:, :half].repeat(batch, 1)  # (b * T, hs / 2) angles
    return (rows,), kwargs


# the forms transformers' packed towers' layers call their attention in: the rows as (b * T, d)
# (Qwen2-VL's), or with a batch axis of one, (1, b * T, d), and attention_mask=None beside cu_seqlens (HunYuan-VL's)
_FORMS = ((2, False), (3, False), (3, True), (2, True))
_FORM: weakref.WeakKeyDictionary[nn.Module, tuple[int, bool]] = weakref.WeakKeyDictionary()


def packed_forward(module: nn.Module, x: torch.Tensor) -> Any:
    """The module on its packed rows in the first form of `_FORMS` it takes, its output back as x's
    rows. The first call (attnlab's probe for batches, before any capture) finds the form; the later
    calls reuse it."""
    args, kwargs = packed_call(module, x)
    if module not in _FORM:
        for form in _FORMS[:-1]:
            try:
                with torch.random.fork_rng(devices=[]):  # a form that fails draws nothing from the run's seed
                    _call(module, args[0], kwargs, form)
            except Exception:  # noqa: BLE001 - a form the module does not take fails in many ways
                continue
            _FORM[module] = form
            break
        else:
            _FORM[module] = _FORMS[-1]  # the last form: the module's own error, if it fails too
    return unpacked(_call(module, args[0], kwargs, _FORM[module]), x)


def _call(module: nn.Module, rows: torch.Tensor, kwargs: dict[str, Any], form: tuple[int, bool]) -> Any:
    rank, mask = form
    return module(rows if rank == 2 else rows[None], **kwargs, **({"attention_mask": None} if mask else {}))


def unpacked(value: Any, x: torch.Tensor) -> Any:
    """A packed call's output ((1,) b * T, ·), or the first element of a tuple, back as x's rows (b, T, ·)."""
    rows = x.shape[:-1]
    if isinstance(value, torch.Tensor):
        return value.reshape(*rows, value.shape[-1])
    if isinstance(value, tuple) and value and isinstance(value[0], torch.Tensor):
        return (value[0].reshape(*rows, value[0].shape[-1]), *value[1:])
    return value

