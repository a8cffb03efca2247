"""Reading a torch call as the capture sees it: the op's name, its tensors, a product as an einsum,
and the call replayed with one argument swapped. Nothing here knows about attention stages."""

from __future__ import annotations

import inspect
import string
from typing import Any

import torch

CONVS = {"conv1d", "conv2d"}  # products only with a kernel of size 1 (`_unit_conv`); any other passes tags on
PRODUCTS = {"matmul", "__matmul__", "__rmatmul__", "mm", "bmm", "addmm", "baddbmm", "einsum", "linear", *CONVS}
_CONV_SETTINGS = {"stride": 3, "padding": 4, "dilation": 5, "groups": 6}  # conv1d's/conv2d's positions after the bias
SHAPE_OPS = {
    "T", "mT", "t", "transpose", "permute", "view", "reshape", "contiguous", "clone", "detach",
    "squeeze", "unsqueeze", "flatten", "unflatten", "expand", "to", "float", "__getitem__", "split",
    "chunk", "unbind", "select", "narrow", "movedim", "swapaxes", "swapdims", "view_as", "reshape_as",
    "tensor_split", "__iter__",
}
# ops whose other tensor gives only a dtype, a device or a shape: the result is the first's alone
FIRST_ONLY = {"to", "type_as", "view_as", "reshape_as", "expand_as"}
# ops that make a fresh tensor from another's dtype and device: nothing of its values
FRESH = {"new_zeros", "new_ones", "new_empty", "new_full", "new_tensor", "zeros_like", "ones_like", "empty_like",
         "full_like", "rand_like", "randn_like"}
# ops that commute with a scalar factor: a pre-scaled projection keeps its factor through them
KEEP_FACTOR = SHAPE_OPS | {"roll", "flip", "index_select"}
NORMS = ("layer_norm", "rms_norm", "group_norm")
JOIN = {"cat", "concat", "concatenate"}
MUL = {"mul", "multiply", "mul_", "multiply_", "__mul__", "__rmul__", "__imul__"}
DIV = {"div", "divide", "true_divide", "div_", "divide_", "true_divide_", "__truediv__", "__itruediv__"}
NEG = {"neg", "negative", "neg_", "negative_", "__neg__"}
MAX = {"max", "amax"}
SUB = {"sub", "subtract", "__sub__"}
_BATCH_LETTERS = string.ascii_uppercase


def op_name(func: Any) -> str:
    """`Tensor.T` reaches the mode as the getset descriptor's `__get__`: use the attribute name."""
    name = getattr(func, "__name__", "")
    if name == "__get__":
        name = getattr(getattr(func, "__self__", None), "__name__", name)
    return name


def tensors_in(values: Any) -> list[torch.Tensor]:
    found = []
    for value in values:
        if isinstance(value, torch.Tensor):
            found.append(value)
        elif isinstance(value, (tuple, list)):
            found.extend(v for v in value if isinstance(v, torch.Tensor))
    return found


def as_einsum(name: str, args: tuple[Any, ...],
              kwargs: dict[str, Any] | None = None) -> tuple[list[torch.Tensor], list[str], str] | None:
    """Any two-operand product as (operands, their index letters, output letters), every dim named
    (its operands by keyword too: BLOOM's `alibi.baddbmm(batch1=..., batch2=...)`)."""
    args = (*args, *((kwargs or {})[k] for k in ("batch1", "batch2", "mat1", "mat2") if k in (kwargs or {})))
    if name == "einsum":
        operands = list(args[1]) if len(args) == 2 and isinstance(args[1], (tuple, list)) else list(args[1:])
        equation = str(args[0]).replace(" ", "")
        if len(operands) != 2 or "->" not in equation or "..." in equation:
            return None
        inputs, out = equation.split("->")
        letters = inputs.split(",")
        if len(letters) != 2 or min(len(out), *(len(s) for s in letters)) < 2:
            return None
        if not (set(letters[0]) & set(letters[1])) - set(out):  # no contraction: not a product
            return None
        return operands, letters, out
    if name in ("conv1d", "conv2d"):
        return _unit_conv(args, kwargs or {})
    if name in ("addmm", "baddbmm"):
        args = args[1:]  # addmm(added, a, b) = added + a @ b (GPT-2's Conv1D projects with it)
    if len(args) < 2:
        return None
    a, b = (args[1], args[0]) if name == "__rmatmul__" else (args[0], args[1])
    if not (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)) or min(a.dim(), b.dim()) < 2:
        return None
    n = max(a.dim(), b.dim())
    batch = _BATCH_LETTERS[: n - 2]
    first = batch[n - a.dim():] + "ij"
    if name == "linear":  # F.linear(x, W) = x @ W.T
        return [a, b], [first, batch[n - b.dim():] + "kj"], batch + "ik"
    return [a, b], [first, batch[n - b.dim():] + "jk"], batch + "ik"


def _unit_conv(args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[list[torch.Tensor], list[str], str] | None:
    """A kernel-1 convolution of one group, stride 1 and no padding (SqueezeBERT's, Vocos' q/k/v): a product
    over the channels axis, (b, c_in, *positions) with (c_out, c_in, 1, ...) -> (b, c_out, *positions). Of
    several groups (SqueezeBERT's) each group's block: the letters are the one-group product's, which a
    product with a parameter is read by (a projection) all the same."""
    x = args[0] if args else kwargs.get("input")
    weight = args[1] if len(args) > 1 else kwargs.get("weight")
    if not (isinstance(x, torch.Tensor) and isinstance(weight, torch.Tensor)) or weight.dim() < 3:
        return None
    settings = {key: kwargs.get(key, args[at] if len(args) > at else None) for key, at in _CONV_SETTINGS.items()}
    plain = {"stride": 1, "padding": 0, "dilation": 1}
    if any(k != 1 for k in weight.shape[2:]) or any(
            v is not None and v not in (plain[key], (plain[key],) * (weight.dim() - 2), str(plain[key]), "valid")
            for key, v in settings.items() if key in plain):
        return None
    positions = "xyz"[: weight.dim() - 2]
    batch = "b" if x.dim() == weight.dim() else ""
    ones = "".join(string.ascii_uppercase[i] for i in range(weight.dim() - 2))  # the kernel's size-1 dims
    return [x, weight], [batch + "c" + positions, "oc" + ones], batch + "o" + positions


def arranged(tensor: torch.Tensor, letters: str, order: str) -> torch.Tensor:
    """The operand's dims permuted into `order` (a view, never a copy); letters it lacks are skipped."""
    wanted = [c for c in order if c in letters]
    wanted += [c for c in letters if c not in wanted]
    dims = [letters.index(c) for c in wanted]
    return tensor if dims == sorted(dims) else tensor.permute(dims)


def is_inplace(name: str) -> bool:
    return (name.endswith("_") and not name.startswith("_")) or name in (
        "__iadd__", "__isub__", "__imul__", "__itruediv__", "__idiv__")


def bind(func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any] | None:
    try:
        return dict(inspect.signature(func).bind(*args, **kwargs).arguments)
    except (TypeError, ValueError):
        return None


def replayed(func: Any, args: tuple[Any, ...], kwargs: dict[str, Any], tensor: torch.Tensor, substitute: torch.Tensor,
             outputs: list[torch.Tensor]) -> list[torch.Tensor | None] | None:
    """`func` once more with `substitute` in place of `tensor` (the mode is off inside its handler),
    matched to `outputs` one for one; None where the replay does not fit."""
    if func is None:
        return None

    def swap(value: Any) -> Any:
        if value is tensor:
            return substitute
        if isinstance(value, (tuple, list)):
            return type(value)(swap(v) for v in value)
        return value

    try:
        replay = func(*swap(args), **{k: swap(v) for k, v in kwargs.items()})
    except (RuntimeError, TypeError, ValueError, IndexError):
        return None
    replays = tensors_in([replay])
    if len(replays) != len(outputs):
        return None
    return [r if r.shape == o.shape else None for r, o in zip(replays, outputs)]


def one_dim(dim: Any, ndim: int) -> int | None:
    """A reduction's dim as a non-negative int, or None when it is not exactly one dim."""
    if isinstance(dim, (tuple, list)) and len(dim) == 1:
        dim = dim[0]
    if isinstance(dim, bool) or not isinstance(dim, int) or ndim == 0:
        return None
    return dim % ndim
