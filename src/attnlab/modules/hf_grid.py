"""The layout a Hugging Face attention's forward reads its hidden states in, when it is not (b, T, d):
an image's grid or a point batch (below), or sequence-first (T, b, d) (`sequence_first`).

Read from the forward's own source, never guessed from a failing call: the axes it unpacks its
first input's shape into (`batch_size, height, width, _ = hidden_states.shape`, SAM's and ViTDet's
windowed vision attention; `batch, point_batch_size, n_tokens, channel = hidden_states.shape` in a
helper the forward hands it to, SAM's mask decoder; `batch_size, point_batch_size = query.shape[:2]`).
attnlab's (b, T, d) is laid out in that layout: the axes named as a grid (height, width) take the
grid `hf_inputs.grid` makes of T, an axis named as a batch (SAM's point batch) is one item, and the
output is read back as (b, T, ·).
"""

from __future__ import annotations

import ast
import inspect
import textwrap
from typing import Any

import torch
from torch import nn

from attnlab.modules.class_cache import per_class
from attnlab.modules.hf_inputs import grid
from attnlab.modules.hf_lineage import transformers_class

_HEIGHT = ("height", "h", "H", "hh", "grid_h", "patch_h")
_WIDTH = ("width", "w", "W", "ww", "grid_w", "patch_w")


@per_class
def axes(cls: type) -> tuple[str, ...] | None:
    """The forward's input as it names its axes when they are more than (b, T, d): ("batch",
    "height", "width", "d") for a grid, ("batch", "batch", "tokens", "d") for a point batch; None else."""
    forward = _function(getattr(cls, "forward", None))
    if forward is None or len(forward.args.args) < 2:
        return None
    names = _unpacked(forward, forward.args.args[1].arg)
    if names is None:  # handed to a helper of the class's as its first argument (SAM's _separate_heads)
        names = next((found for helper in _helpers(cls, forward) if (found := _unpacked(*helper)) is not None), None)
    return names


def _function(function: Any) -> ast.FunctionDef | None:
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(function)))
    except (TypeError, OSError, SyntaxError):
        return None
    node = tree.body[0] if tree.body else None
    return node if isinstance(node, ast.FunctionDef) else None


def _unpacked(function: ast.FunctionDef, name: str) -> tuple[str, ...] | None:
    """The axes a tuple-unpack of `name.shape` names: all four of them, or the leading ones of
    `name.shape[:k]` where one beyond the first is named as a batch (the rest: tokens, d)."""
    for node in ast.walk(function):
        if not (isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Tuple)):
            continue
        names = tuple(e.id if isinstance(e, ast.Name) else "_" for e in node.targets[0].elts)
        value = node.value
        if _shape_of(value, name) and len(names) == 4:
            return tuple(_kind(n, i) for i, n in enumerate(names))
        if (isinstance(value, ast.Subscript) and _shape_of(value.value, name) and len(names) >= 2
                and any("batch" in n for n in names[1:])):
            return (*(_kind(n, i) for i, n in enumerate(names)), "tokens", "d")
    return None


def _shape_of(node: ast.expr, name: str) -> bool:
    return (isinstance(node, ast.Attribute) and node.attr == "shape" and isinstance(node.value, ast.Name)
            and node.value.id == name)


def _kind(name: str, index: int) -> str:
    if index == 0 or "batch" in name:
        return "batch"
    return "height" if name in _HEIGHT else "width" if name in _WIDTH else "tokens" if index == 2 else "d"


def _helpers(cls: type, forward: ast.FunctionDef) -> list[tuple[ast.FunctionDef, str]]:
    """The class's own methods the forward calls with its input first, with that parameter's name."""
    first = forward.args.args[1].arg
    found = []
    for call in (n for n in ast.walk(forward) if isinstance(n, ast.Call)):
        func = call.func
        if not (isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) and func.value.id == "self"
                and call.args and isinstance(call.args[0], ast.Name) and call.args[0].id == first):
            continue
        helper = _function(getattr(cls, func.attr, None))
        if helper is not None and len(helper.args.args) >= 2:
            found.append((helper, helper.args.args[1].arg))
    return found


def sequence_first(module: nn.Module) -> bool:
    """Its input is (T, b, d): it hands it to a torch nn.MultiheadAttention of its own that is not
    batch_first, and turns no axes itself (BridgeTower's residual attention; its model permutes), or
    its forward reads its input's size as (length, batch, width) (FSMT's `tgt_len, bsz, embed_dim`)."""
    library = transformers_class(type(module)) or type(module)  # the library's layout, not a copy's
    if _unpacks_length_first(library) or _turns_first(library):
        return True
    if not any(isinstance(c, nn.MultiheadAttention) and not c.batch_first for c in module.children()):
        return False
    try:
        source = inspect.getsource(type(module))
    except (TypeError, OSError):
        return False
    return not any(turn in source for turn in ("transpose(0, 1)", "transpose(1, 0)", "permute(1, 0"))


_BATCH = ("bsz", "batch_size", "batch", "bs")
_TURNS = {"permute": (1, 0, 2), "transpose": (0, 1)}


def _forward_and_input(cls: type[nn.Module]) -> tuple[ast.FunctionDef, str] | None:
    """The class's forward parsed, with the name of its first input; None where its source cannot be read."""
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(cls.forward)))
    except (TypeError, OSError, SyntaxError):
        return None
    function = tree.body[0]
    if not isinstance(function, ast.FunctionDef) or len(function.args.args) < 2:
        return None
    return function, function.args.args[1].arg


@per_class
def _turns_first(cls: type[nn.Module]) -> bool:
    """Whether forward's first statement on its input turns it from (T, b, d) to (b, T, d) itself
    (Mask2Former's `hidden_states = hidden_states.permute(1, 0, 2)`, then its size read as (batch,
    length, width)): its model passes it sequence first."""
    parsed = _forward_and_input(cls)
    if parsed is None:
        return False
    function, given = parsed
    first = next((node for node in ast.walk(function) if isinstance(node, ast.Assign)
                  and any(isinstance(t, ast.Name) and t.id == given for t in node.targets)), None)
    value = first.value.body if first is not None and isinstance(first.value, ast.IfExp) else getattr(first, "value", None)
    if not (isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute) and value.func.attr in _TURNS
            and isinstance(value.func.value, ast.Name) and value.func.value.id == given):
        return False
    turn = tuple(a.value for a in value.args if isinstance(a, ast.Constant))
    if turn not in (_TURNS[value.func.attr], _TURNS[value.func.attr][::-1][-2:]):
        return False
    # and then reads it batch first (`batch_size, target_len, embed_dim = hidden_states.size()`): a turn
    # the other way, to hand (T, b, d) to a torch attention, reads no batch first
    return any(isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Tuple) and len(node.targets[0].elts) == 3
               and isinstance(node.targets[0].elts[0], ast.Name) and node.targets[0].elts[0].id in _BATCH
               and given in {n.id for n in ast.walk(node.value) if isinstance(n, ast.Name)}
               for node in ast.walk(function))


@per_class
def _unpacks_length_first(cls: type[nn.Module]) -> bool:
    """Whether forward's first statement on its input unpacks its size as (length, batch, width):
    `tgt_len, bsz, embed_dim = query.size()`, the input untouched before (Longformer's transposes first)."""
    parsed = _forward_and_input(cls)
    if parsed is None:
        return False
    function, given = parsed
    for node in ast.walk(function):
        if not isinstance(node, ast.Assign):
            continue
        if any(isinstance(t, ast.Name) and t.id == given for t in node.targets):
            return False  # reassigned first: its own layout is not what it was given
        target, value = node.targets[0], node.value
        read = value.func.value if isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute) \
            and value.func.attr == "size" else value.value if isinstance(value, ast.Attribute) and value.attr == "shape" \
            else None
        if isinstance(target, ast.Tuple) and len(target.elts) == 3 and isinstance(read, ast.Name) and read.id == given:
            names = [e.id if isinstance(e, ast.Name) else "" for e in target.elts]
            return names[1] in _BATCH and names[0] not in _BATCH
    return False


def spatial(module: nn.Module) -> bool:
    """Its forward reads its input in a layout other than (b, T, d)."""
    return axes(type(module)) is not None


def laid_out(module: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """x (b, T, d) in the forward's layout: (b, H, W, d) on the grid of T, or (b, 1, T, d)."""
    kinds = axes(type(module)) or ()
    batch, tokens, width = x.shape
    if "height" in kinds:
        rows, columns = grid(module, x)
        return x.reshape(batch, rows, columns, width)  # (b, H, W, d)
    return x.reshape(batch, 1, tokens, width)  # (b, 1, T, d): one item of the extra batch axis


def read_back(value: Any, x: torch.Tensor) -> Any:
    """The output (or a tuple's first element) in the forward's layout, back as x's rows (b, T, ·)."""
    if isinstance(value, torch.Tensor) and value.dim() > x.dim():
        return value.reshape(*x.shape[:-1], value.shape[-1])
    if isinstance(value, tuple) and value and isinstance(value[0], torch.Tensor) and value[0].dim() > x.dim():
        return (value[0].reshape(*x.shape[:-1], value[0].shape[-1]), *value[1:])
    return value
