"""Capture every stage of an attention forward pass, without the plugin's help.

A variant is the source's class pasted verbatim: it imports nothing from attnlab and names no
stages. So the stages are found by where a tensor sits in the data flow, not by variable names
or call order (the source computes keys before queries):

- a product with a projection parameter (`x @ W_key`, `nn.Linear`, a fused `qkv` Linear) makes a
  projection; a fused projection's columns are split into queries, keys and values by position,
  followed through every view, permute, split and unbind;
- the first product of two projection-derived tensors is the scores; its operands are labelled
  queries and keys by the parameters they come from (by their position in the product only
  when that cannot tell), so `keys @ queries.T` keeps its queries line as the queries;
- the softmax input is the scaled scores, its output the weights; a hand-written softmax
  (`exp(s - s.max(dim, keepdim=True).values) / exp(...).sum(dim, keepdim=True)`, `s.exp() /
  s.exp().sum(dim, keepdim=True)`, `log_softmax(s, dim).exp()`) counts as one;
- the product of the (possibly dropped-out) weights with a projection is the context, that
  projection the values; the module's return value is the output.

Several independent score products (the source's MultiHeadAttentionWrapper runs one
CausalAttention per head) are stacked along the heads axis. Kernels that never materialise the
weights — `F.scaled_dot_product_attention`, FlexAttention's operator and
`F.multi_head_attention_forward` (`nn.MultiheadAttention`) — are read from their arguments:
scores, scaled scores and weights
(and for nn.MultiheadAttention every stage but the output) are computed by attnlab from the
kernel's own inputs, mask and scale, and marked `reconstructed`.

A projection multiplied or divided by a scalar before the score product stays a projection; the
factor is recorded in `Capture.prescale` and the stage holds the UNscaled tensor. An in-place op
on the scores (`attn_scores.masked_fill_(mask, -inf)`, `attn_scores /= d_k ** 0.5`) is preceded
by one copy of the scores, so both the scores and the softmax input are the module's own values.

Stages are returned in the canonical view of `attnlab.capture.stages.AXES` (views where possible) with
each stage's shape in the module's own rank. A torch.overrides.TorchFunctionMode sees every torch
call with its arguments; tensors are tagged in a side table (weak references, no copies).
"""

from __future__ import annotations

import inspect
import math
import string
import weakref
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any, Iterator, NamedTuple

import torch
import torch.nn.attention.flex_attention as flex_attention_api
import torch.nn.functional as F
from torch import nn
from torch._ops import HigherOrderOperator
from torch.overrides import TorchFunctionMode

from attnlab.modules import hf
from attnlab.modules.calling import Returned, call
from attnlab.modules.layouts import parameter_role
from attnlab.capture.stages import STAGES
from attnlab.modules.roles import is_norm, parameter_owners, projection_role


@dataclass
class Capture:
    stages: dict[str, torch.Tensor]  # canonical view (stages.AXES); "inputs" and "output" always present
    native_shapes: dict[str, tuple[int, ...]]  # each stage's shape in the module's own rank
    sources: dict[str, str | None]  # "queries"/"keys"/"values" -> projection role of the parameter that made it
    softmax_dim: int | None  # the softmax's dim in the module's own rank of the weights, non-negative
    missing: list[str] = field(default_factory=list)  # stages that could not be found (never guessed)
    prescale: dict[str, float] = field(default_factory=dict)  # factors on queries / keys before the product
    reconstructed: list[str] = field(default_factory=list)  # stages attnlab computed from a kernel's inputs
    score_roles: tuple[str | None, str | None] = (None, None)  # roles of the score product's row, column operand
    output_is_context: bool = False  # the module returned its context itself: output is an alias
    softmax_axis: int | None = None  # the softmax's dim in the canonical (batch, heads, query, key) view
    out_inputs: list[torch.Tensor] = field(default_factory=list)  # what each output-projection product was given
    returned: str = ""  # what forward returned, for an error: its shape, or its type
    call: Returned | None = None  # what forward returned as a whole, and which element is the output
    declared_scale: tuple[float, str] | None = None  # a factor on the scores its config declares, and where
    kv_heads: int | None = None  # its own key/value heads, once the diagnosis views keys at that granularity

    # What "scores" holds: always the product of the UNscaled queries and keys, so
    # `divergence_scores` compares like with like and `scale_observed` is the EFFECTIVE scale.
    # With a pre-factor the module never computed that product: capture divides the one it did
    # compute by the recorded factors (one elementwise pass), the only extra score-sized tensor
    # besides the copy made before an in-place op on the scores.


class _SoftmaxStep(NamedTuple):
    """A step of a hand-written softmax: exp(logits * factor - max) / sum(..., dim)."""

    step: str  # "max" | "shifted" | "exp" | "expsum" | "logsoftmax"
    logits: torch.Tensor
    factor: float = 1.0
    dim: int | None = None


class _Tag(NamedTuple):
    kind: str  # "input" | "param" | "proj" | "scores" | "derived" (from scores) | "weights" | "context"
    role: str | None = None  # "param"/"proj": the projection role of the parameter
    factor: float = 1.0  # "param"/"proj": the scalar the tensor was multiplied by since the projection
    base: torch.Tensor | None = None  # the same tensor without that factor (same shape); None: divide on use
    softmax: _SoftmaxStep | None = None  # "derived" on the way to a hand-written softmax
    head: int | None = None  # "scores"/"derived"/"weights"/"context": which score product it comes from
    columns: torch.Tensor | None = None  # a fused projection's output column of each element (same shape)
    width: int = 0  # a fused projection's width per role (its columns // 3)


@dataclass
class _Head:
    """What one score product led to: a head of its own, or every head of a batched product."""

    found: dict[str, torch.Tensor] = field(default_factory=dict)
    sources: dict[str, str | None] = field(default_factory=dict)
    prescale: dict[str, float] = field(default_factory=dict)
    reconstructed: set[str] = field(default_factory=set)
    softmax_dim: int | None = None  # in the rank of the module's own tensor
    softmax_axis: int | None = None  # in the canonical (batch, heads, query, key) view
    operands: tuple | None = None  # the score product's operands and einsum letters
    roles: tuple[str | None, str | None] = (None, None)
    output: torch.Tensor | None = None  # the context tensor as the module made it


_ACTIVATIONS = ("input", "proj")  # what queries, keys and values are made of
_ATTENTION = ("scores", "derived", "weights")  # what the weights are made of
_PRIORITY = ("weights", "derived", "scores", "proj", "param", "input", "context")
_TAP_KINDS = {"inputs": "input", "scores": "scores", "scaled_scores": "derived", "weights": "weights",
              "weights_applied": "weights", "context": "context"}  # queries, keys, values: "proj"
_PRODUCTS = {"matmul", "__matmul__", "__rmatmul__", "mm", "bmm", "addmm", "baddbmm", "einsum", "linear"}
_SHAPE_OPS = {
    "T", "mT", "t", "transpose", "permute", "view", "reshape", "contiguous", "clone", "detach",
    "squeeze", "unsqueeze", "flatten", "unflatten", "expand", "to", "float", "__getitem__", "split",
    "chunk", "unbind", "select", "narrow", "movedim", "swapaxes", "swapdims", "view_as", "reshape_as",
    "tensor_split", "__iter__",
}
# ops that commute with a scalar factor: a pre-scaled projection keeps its factor through them
_KEEP_FACTOR = _SHAPE_OPS | {"roll", "flip", "index_select"}
_MUL = {"mul", "multiply", "mul_", "multiply_", "__mul__", "__rmul__", "__imul__"}
_DIV = {"div", "divide", "true_divide", "div_", "divide_", "true_divide_", "__truediv__", "__itruediv__"}
_NEG = {"neg", "negative", "neg_", "negative_", "__neg__"}
_MAX = {"max", "amax"}
_SUB = {"sub", "subtract", "__sub__"}
_LOGITS = ("scores", "derived")
_FUSED_ROLES = ("queries", "keys", "values")  # a fused projection's column blocks, in order

_ACTIVE: ContextVar[_Recorder | None] = ContextVar("attnlab_capture", default=None)


def tap(stage: str, tensor: torch.Tensor) -> torch.Tensor:
    """Mark `tensor` as `stage` from inside a plugin; returns it unchanged.

    For variants whose stages the data flow cannot reveal. A no-op outside `capture`, so a
    tapped class still runs anywhere; an explicit tap wins over what capture infers.
    """
    if stage not in STAGES:
        raise ValueError(f"tap: unknown stage '{stage}'; allowed: {', '.join(STAGES)}")
    recorder = _ACTIVE.get()
    if recorder is not None:
        recorder.tapped(stage, tensor)
    return tensor


def capture(module: nn.Module, x: torch.Tensor) -> Capture:
    """Run `module(x)` once under no_grad and return every stage found in its data flow."""
    recorder = _Recorder(module, x)
    token = _ACTIVE.set(recorder)
    try:
        with torch.no_grad(), _flex_attention_eager(), recorder:
            returned = call(module, x)
    finally:
        _ACTIVE.reset(token)
    try:
        captured = recorder.result(x, returned)
        captured.declared_scale = hf.declared_scale(module) if hf.is_hf_module(module) else None
        return captured
    finally:  # the recorder may sit in a reference cycle: what it held must not wait for the collector
        recorder.release()


def _name(func: Any) -> str:
    """`Tensor.T` reaches the mode as the getset descriptor's `__get__`: use the attribute name."""
    name = getattr(func, "__name__", "")
    if name == "__get__":
        name = getattr(getattr(func, "__self__", None), "__name__", name)
    return name


def _tensors(values: Any) -> list[torch.Tensor]:
    found = []
    for value in values:
        if isinstance(value, torch.Tensor):
            found.append(value)
        elif isinstance(value, (tuple, list)):
            found.extend(v for v in value if isinstance(v, torch.Tensor))
    return found


_BATCH_LETTERS = string.ascii_uppercase


def _as_einsum(name: str, args: tuple) -> tuple[list[torch.Tensor], list[str], str] | None:
    """Any two-operand product as (operands, their index letters, output letters), every dim named."""
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
    if name in ("addmm", "baddbmm"):
        args = args[1:]  # addmm(added, a, b) = added + a @ b (GPT-2's Conv1D projects with it)
    a, b = (args[1], args[0]) if name == "__rmatmul__" else (args[0], args[1])
    if not (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)) or min(a.dim(), b.dim()) < 2:
        return None
    n = max(a.dim(), b.dim())
    batch = _BATCH_LETTERS[: n - 2]
    first = batch[n - a.dim():] + "ij"
    if name == "linear":  # F.linear(x, W) = x @ W.T
        return [a, b], [first, batch[n - b.dim():] + "kj"], batch + "ik"
    return [a, b], [first, batch[n - b.dim():] + "jk"], batch + "ik"


def _arranged(tensor: torch.Tensor, letters: str, order: str) -> torch.Tensor:
    """The operand's dims permuted into `order` (a view, never a copy); letters it lacks are skipped."""
    wanted = [c for c in order if c in letters]
    wanted += [c for c in letters if c not in wanted]
    dims = [letters.index(c) for c in wanted]
    return tensor if dims == sorted(dims) else tensor.permute(dims)


class _Recorder(TorchFunctionMode):
    """Tags tensors with their provenance and records each stage as the data flow reveals it."""

    def __init__(self, module: nn.Module, x: torch.Tensor) -> None:
        super().__init__()
        owners = parameter_owners(module)
        self._params = {id(p): _Tag("param", None if is_norm(owners.get(name, module)) else projection_role(name))
                        for name, p in module.named_parameters()}
        self._fused = {id(p) for name, p in module.named_parameters() if _is_fused(name, p)}
        self._out = {id(p) for name, p in module.named_parameters() if parameter_role(name) == "out"}
        self.out_inputs: list[torch.Tensor] = []
        self._tags: dict[int, tuple[weakref.ref, _Tag]] = {}
        self.heads: list[_Head] = []
        self.explicit: dict[str, torch.Tensor] = {}
        self._batch = x.shape[0] if x.dim() == 3 else 1
        self._set_tag(x, _Tag("input"))

    def _set_tag(self, tensor: torch.Tensor, tag: _Tag) -> None:
        self._tags[id(tensor)] = (weakref.ref(tensor), tag)

    def _tag(self, tensor: Any) -> _Tag | None:
        if not isinstance(tensor, torch.Tensor):
            return None
        entry = self._tags.get(id(tensor))
        if entry is not None and entry[0]() is tensor:
            return entry[1]
        return self._params.get(id(tensor))

    def release(self) -> None:
        """Drop every tensor the recording held; the Capture keeps what it needs."""
        self.heads, self.explicit, self._tags = [], {}, {}
        self.out_inputs = []

    def tapped(self, stage: str, tensor: torch.Tensor) -> None:
        """Record the stage, and tag the tensor as that stage so the data flow after it is read too."""
        self.explicit[stage] = tensor
        kind = _TAP_KINDS.get(stage, "proj")
        old = self._tag(tensor)
        if kind not in ("proj", "input") and not self.heads:
            self.heads.append(_Head())  # head 0, which the tag names: what follows the tapped stage is read into it
        self._set_tag(tensor, _Tag(kind, old.role if old is not None and kind == "proj" else None, head=0))

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = _name(func)
        if name == "multi_head_attention_forward":
            return self._multi_head_attention(func, args, kwargs)
        if _is_inplace(name) and args:
            self._keep_scores_before_inplace(args[0])
        out = func(*args, **kwargs)
        if name == "__iter__":  # `queries, keys, values = qkv`: the items are tagged as unbind's would be
            out = list(out)
            self._propagate(lambda t: list(t.unbind(0)), "unbind", args, kwargs, out)
            return iter(out)
        if name in _PRODUCTS:
            self._product(func, name, args, kwargs, out)
        elif name in ("softmax", "log_softmax"):
            self._softmax(name, args, kwargs, out)
        elif name == "scaled_dot_product_attention":
            self._sdpa(args, kwargs, out)
        elif name == "flex_attention" and isinstance(func, HigherOrderOperator):
            self._flex_attention(args, out)
        elif not (self._scaling(name, args, kwargs, out) or self._manual_softmax(name, args, kwargs, out)):
            self._propagate(func, name, args, kwargs, out)
        return out

    # -- provenance -----------------------------------------------------------------------------

    def _propagate(self, func, name: str, args: tuple, kwargs: dict, out: Any) -> None:
        outputs = _tensors([out])
        if not outputs:
            return
        tagged = [(t, tag) for t in _tensors([*args, *kwargs.values()]) if (tag := self._tag(t)) is not None]
        if not tagged:
            return
        source, tag = min(tagged, key=lambda pair: _PRIORITY.index(pair[1].kind))
        if tag.kind in _LOGITS and name not in _SHAPE_OPS:
            self._tag_all(out, _Tag("derived", head=tag.head))
            return
        shape_op = name in _KEEP_FACTOR
        bases = _replayed(func, args, kwargs, source, tag.base, outputs) if shape_op and tag.base is not None else None
        columns = (_replayed(func, args, kwargs, source, tag.columns, outputs)
                   if name in _SHAPE_OPS and tag.columns is not None else None)
        for i, tensor in enumerate(outputs):
            new = tag
            if tag.factor != 1.0 and not shape_op:  # the factor survives only ops that commute with it
                new = _Tag(tag.kind, tag.role, head=tag.head)
            elif tag.factor != 1.0:
                new = new._replace(base=bases[i] if bases else None)
            if tag.columns is not None:
                new = new._replace(columns=columns[i] if columns else None)
            self._set_tag(tensor, new)

    def _keep_scores_before_inplace(self, target: Any) -> None:
        """An in-place op is about to overwrite a recorded scores tensor: keep its values first."""
        tag = self._tag(target)
        if tag is None or tag.kind != "scores" or tag.head is None:
            return
        head = self.heads[tag.head]
        if head.found.get("scores") is target:
            head.found["scores"] = target.clone()  # the one copy: the module overwrites its own scores
        self._set_tag(target, _Tag("derived", head=tag.head))

    def _scaling(self, name: str, args: tuple, kwargs: dict, out: Any) -> bool:
        """A projection (or projection parameter) times a scalar: keep its provenance, record the factor."""
        if not isinstance(out, torch.Tensor) or len(args) not in (1, 2) or kwargs.get("rounding_mode") is not None:
            return False
        pairs = []
        if name in _MUL and len(args) == 2:
            pairs = [(args[0], self._scalar(args[1])), (args[1], self._scalar(args[0]))]
        elif name in _DIV and len(args) == 2:
            divisor = self._scalar(args[1])
            pairs = [(args[0], 1.0 / divisor if divisor else None)]
        elif name in _NEG:
            pairs = [(args[0], -1.0)]
        for tensor, factor in pairs:
            tag = self._tag(tensor)
            if tag is None or factor is None or out.shape != tensor.shape:
                continue
            if tag.kind in ("proj", "param"):
                in_place = out is tensor
                if tag.base is not None and tag.base is not out:
                    base = tag.base  # (x @ W * a) / b: still the same unscaled tensor
                elif tag.factor == 1.0 and not in_place:
                    base = tensor  # the projection itself, kept as it was
                else:
                    base = None  # overwritten in place: divided back on use
                self._set_tag(out, tag._replace(factor=tag.factor * factor, base=base, softmax=None))
                return True
            step = tag.softmax
            if tag.kind == "derived" and step and step.step == "shifted" and out is not tensor:
                # (s - s.max(dim)) / sqrt(d_k): the softmax input is s / sqrt(d_k), shifted per row
                self._set_tag(out, _Tag("derived", softmax=step._replace(factor=step.factor * factor), head=tag.head))
                return True
        return False

    def _scalar(self, value: Any) -> float | None:
        """A Python number, or an untagged one-element tensor, as a float; else None."""
        if isinstance(value, bool):
            return None
        if isinstance(value, (int, float)):
            return float(value)
        if isinstance(value, torch.Tensor) and value.numel() == 1 and self._tag(value) is None:
            return float(value)
        return None

    def _tag_all(self, out: Any, tag: _Tag) -> None:
        for tensor in _tensors([out]):
            self._set_tag(tensor, tag)

    # -- softmax ----------------------------------------------------------------------------------

    def _manual_softmax(self, name: str, args: tuple, kwargs: dict, out: Any) -> bool:
        """exp of scores-derived logits (max-shifted or not), divided by its own sum along one dim."""
        if not args or not isinstance(args[0], torch.Tensor):
            return False
        tag = self._tag(args[0])
        if tag is None or tag.kind not in _LOGITS or "weights" in self._head(tag).found:
            return False
        step = tag.softmax or _SoftmaxStep("", args[0])
        derived = lambda s: _Tag("derived", softmax=s, head=tag.head)  # noqa: E731
        if name in _MAX:
            self._tag_all(out, derived(_SoftmaxStep("max", args[0])))
            return True
        if name in _SUB and len(args) == 2 and "alpha" not in kwargs and isinstance(args[1], torch.Tensor):
            other = self._tag(args[1])
            if other is not None and other.softmax and other.softmax.step == "max" and other.softmax.logits is args[0]:
                self._set_tag(out, derived(_SoftmaxStep("shifted", args[0])))
                return True
            return False
        if name == "exp":
            if step.step == "logsoftmax":
                self._record_softmax(tag.head, step.logits, step.dim, out)
                return True
            logits, factor = (step.logits, step.factor) if step.step == "shifted" else (args[0], 1.0)
            self._set_tag(out, derived(_SoftmaxStep("exp", logits, factor)))
            return True
        if name == "sum" and step.step == "exp":
            dim = _one_dim(args[1] if len(args) > 1 else kwargs.get("dim", kwargs.get("axis")), args[0].dim())
            if dim is None:
                return False
            self._set_tag(out, derived(step._replace(step="expsum", dim=dim)))
            return True
        if name in _DIV and len(args) == 2 and step.step == "exp" and isinstance(args[1], torch.Tensor):
            total = self._tag(args[1])
            total_step = total.softmax if total is not None else None
            if total_step is None or total_step.step != "expsum":
                return False
            if not (total_step.factor == step.factor and _same(total_step.logits, step.logits)
                    and _broadcasts_along(args[1], out, total_step.dim)):
                return False
            logits = total_step.logits
            if total_step.factor != 1.0:  # scaled after the shift: the module never made the softmax input
                logits = logits * total_step.factor
            self._record_softmax(tag.head, logits, total_step.dim, out)
            return True
        return False

    def _softmax(self, name: str, args: tuple, kwargs: dict, out: torch.Tensor) -> None:
        source = args[0] if args else kwargs.get("input")
        tag = self._tag(source)
        if tag is None or tag.kind not in _LOGITS or "weights" in self._head(tag).found:
            self._propagate(None, name, args, kwargs, out)
            return
        dim = kwargs.get("dim", args[1] if len(args) > 1 else None)
        if dim is None:  # F.softmax's legacy implicit dim
            dim = 0 if source.dim() in (0, 1, 3) else 1
        logits = source
        step = tag.softmax
        if step and step.step == "shifted":  # softmax(c * (s - max)) == softmax(c * s)
            logits = step.logits if step.factor == 1.0 else step.logits * step.factor
        if name == "log_softmax":  # a softmax only once exp() is taken
            self._set_tag(out, _Tag("derived", softmax=_SoftmaxStep("logsoftmax", logits, dim=dim % source.dim()),
                                    head=tag.head))
            return
        self._record_softmax(tag.head, logits, dim, out)

    def _head(self, tag: _Tag) -> _Head:
        return self.heads[tag.head] if tag.head is not None and tag.head < len(self.heads) else _Head()

    def _record_softmax(self, head: int | None, logits: torch.Tensor, dim: int, weights: torch.Tensor) -> None:
        if head is None:
            return
        found = self.heads[head]
        found.softmax_dim = dim % logits.dim()
        found.softmax_axis = _canonical_axis(found.softmax_dim, logits, self._batch)
        found.found["scaled_scores"] = logits
        found.found["weights"] = weights
        self._set_tag(weights, _Tag("weights", head=head))

    # -- products ---------------------------------------------------------------------------------

    def _product(self, func, name: str, args: tuple, kwargs: dict, out: torch.Tensor) -> None:
        spec = _as_einsum(name, args)
        if spec is None or not isinstance(out, torch.Tensor):
            return
        operands, letters, out_letters = spec
        tags = [self._tag(t) for t in operands]
        kinds = [t.kind if t is not None else None for t in tags]
        if "param" in kinds:
            self._projection(func, name, args, kwargs, operands, tags, kinds.index("param"), out)
        elif all(k in _ACTIVATIONS for k in kinds):
            head = self._repeated_product(operands, letters, out_letters)
            if head is None:
                self._scores(name, args, operands, letters, out_letters, tags, out)
            else:
                self._set_tag(out, _Tag("scores", head=head))  # the scores written out again (a denominator)
        elif sorted(kinds, key=str) in _WEIGHTS_TIMES_VALUES:
            self._context(operands, letters, out_letters, tags, out)

    def _projection(self, func, name, args, kwargs, operands, tags, i: int, out: torch.Tensor) -> None:
        param = tags[i]
        if id(operands[i]) in self._out and tags[1 - i] is not None:
            self.out_inputs.append(operands[1 - i])  # the merged context, as the output projection saw it
        columns, width = None, 0
        if id(operands[i]) in self._fused and out.shape[-1] % 3 == 0:
            width = out.shape[-1] // 3
            columns = torch.arange(out.shape[-1]).expand(out.shape)  # which fused column each element is
        if param.factor == 1.0:
            self._set_tag(out, _Tag("proj", param.role, columns=columns, width=width))
            return
        # x @ (W_query * c): the product once more with the unscaled parameter
        base = _replayed(func, args, kwargs, operands[i], param.base, [out]) if param.base is not None else None
        self._set_tag(out, _Tag("proj", param.role, param.factor, base[0] if base else None, columns=columns, width=width))

    def _repeated_product(self, operands, letters, out_letters) -> int | None:
        """The index of a head whose score product this is again (a softmax's denominator), else None."""
        for index, head in enumerate(self.heads):
            first = head.operands
            if first is None or (letters, out_letters) != (first[1], first[2]):
                continue
            if all(a is b or (a.data_ptr() == b.data_ptr() and a.shape == b.shape and a.stride() == b.stride()
                              and a.dtype == b.dtype) for a, b in zip(operands, first[0])):  # `k.T` is a new view
                return index
        return None

    def _role(self, tag: _Tag) -> str | None:
        """The projection role of an activation: its parameter's, or its fused column block's."""
        if tag.kind != "proj":
            return None
        if tag.role is not None or tag.columns is None or tag.width == 0 or tag.columns.numel() == 0:
            return tag.role
        lo, hi = int(tag.columns.min()), int(tag.columns.max())
        block = lo // tag.width
        return _FUSED_ROLES[block] if block == hi // tag.width and block < 3 else None

    def _scores(self, name, args, operands, letters, out_letters, tags, out) -> None:
        row, col = out_letters[-2], out_letters[-1]
        batch = out_letters[:-2]
        position = [0 if row in letters[0] and row not in letters[1] else 1]
        position.append(1 - position[0])  # operand index in the row (queries) and column (keys) position
        roles = tuple(self._role(tags[i]) for i in position)
        if roles == ("keys", "queries"):  # keys @ queries.T: label by provenance, not by position
            position.reverse()
        head = _Head(operands=(operands, letters, out_letters), roles=roles)
        for stage, i in zip(("queries", "keys"), position):
            operand, tag = operands[i], tags[i]
            letter = row if row in letters[i] else col
            if tag.factor != 1.0:  # pre-scaled: the stage is the projection itself, the factor is noted
                if tag.base is not None:
                    operand = tag.base
                elif tag.factor != 0.0:
                    operand = operand / tag.factor  # scaled in place: a copy, the only way back
                head.prescale[stage] = tag.factor
            head.found[stage] = _arranged(operand, letters[i], batch + letter)
            head.sources[stage] = self._role(tag)
        head.found["scores"] = _arranged(out, out_letters, out_letters)
        if name == "baddbmm":  # added + q @ k.T: the softmax input; the plain product never existed
            head.found["scaled_scores"] = out
            head.found["scores"] = head.found["queries"] @ head.found["keys"].mT
            head.reconstructed.add("scores")
        self.heads.append(head)
        self._set_tag(out, _Tag("scores" if name != "baddbmm" else "derived", head=len(self.heads) - 1))

    def _context(self, operands, letters, out_letters, tags, out) -> None:
        w = 0 if tags[0].kind in _ATTENTION else 1
        v = 1 - w
        head = self._head(tags[w])
        if tags[w].head is None:
            return
        if "context" in head.found:  # weights @ values written out again: the same context, not a new stage
            if head.output is not None and out.shape == head.output.shape and torch.equal(out, head.output):
                self._set_tag(out, _Tag("context", head=tags[w].head))
            return
        contracted = (set(letters[w]) & set(letters[v])) - set(out_letters)
        batch = "".join(c for c in out_letters if c in letters[w] and c in letters[v])
        query = next((c for c in letters[w] if c not in letters[v]), None)
        key = next(iter(contracted), None)
        if query is None or key is None or len(contracted) != 1:
            return
        value_dims = "".join(c for c in letters[v] if c not in letters[w])
        applied = _arranged(operands[w], letters[w], batch + query + key)
        weights = head.found.get("weights")
        if weights is None:
            head.found["weights"] = applied
        elif not _same_values(applied, weights):
            head.found["weights_applied"] = applied
        head.found["values"] = _arranged(operands[v], letters[v], batch + key + value_dims)
        head.sources["values"] = self._role(tags[v])
        head.found["context"] = _arranged(out, out_letters, batch + query + value_dims)
        head.output = out
        self._set_tag(out, _Tag("context", head=tags[w].head))

    # -- kernels that never materialise the weights ----------------------------------------------

    def _sdpa(self, args: tuple, kwargs: dict, out: torch.Tensor) -> None:
        call = {**dict(zip(_SDPA_PARAMETERS, args)), **kwargs}  # a builtin: no signature to bind
        if not all(isinstance(call.get(n), torch.Tensor) for n in _SDPA_PARAMETERS[:3]):
            return
        q, k, v = call["query"], call["key"], call["value"]
        head = _Head()
        for stage, tensor in (("queries", q), ("keys", k), ("values", v)):
            tag = self._tag(tensor)
            if tag is not None and tag.factor != 1.0 and tag.base is not None:
                head.prescale[stage] = tag.factor
                tensor = tag.base
            head.found[stage] = tensor
            head.sources[stage] = self._role(tag) if tag is not None else None
        factor = math.prod(head.prescale.values())
        scale = call.get("scale")
        scale = (q.shape[-1] ** -0.5 if scale is None else float(scale)) * factor
        head.found.update(attend(head.found["queries"], head.found["keys"], scale=scale, mask=call.get("attn_mask"),
                                 is_causal=bool(call.get("is_causal")), mask_means_keep=True))
        head.reconstructed |= {"scores", "scaled_scores", "weights"}
        head.softmax_dim, head.softmax_axis = q.dim() - 1, 3
        if call.get("dropout_p"):
            head.found["weights_applied"] = None  # drawn inside the kernel: cannot be seen
        head.found["context"] = out
        head.roles = (head.sources.get("queries"), head.sources.get("keys"))
        self.heads.append(head)
        self._set_tag(out, _Tag("context", head=len(self.heads) - 1))

    def _flex_attention(self, args: tuple, out: Any) -> None:
        """FlexAttention's operator (query, key, value, score_mod, block mask as a tuple, scale, ...):
        read as SDPA with the mask its block mask's mask_mod makes, and score_mod as an added float
        mask (what it changes in the scaled scores)."""
        q, k, v, score_mod, block_mask, scale = args[:6]
        if not all(isinstance(t, torch.Tensor) for t in (q, k, v)) or not isinstance(out, (tuple, list)):
            return
        keep = flex_attention_api.create_mask(block_mask[-1], q.shape[0], q.shape[1], q.shape[-2], k.shape[-2],
                                              device=q.device)  # (b, num_heads, num_tokens, num_tokens)
        mask: torch.Tensor = keep
        if score_mod is not None and getattr(score_mod, "__name__", "") != "_identity":
            scaled = attend(q, k, scale=q.shape[-1] ** -0.5 if scale is None else float(scale))["scaled_scores"]
            grid = [torch.arange(n, device=q.device) for n in (*q.shape[:2], q.shape[-2], k.shape[-2])]
            from torch._dynamo._trace_wrapped_higher_order_op import TransformGetItemToIndex  # seconds to import

            with TransformGetItemToIndex():  # as torch's create_mask runs a score_mod on whole tensors
                modified = flex_attention_api._vmap_for_bhqkv(score_mod, prefix=(0,))(scaled, *grid)
            mask = torch.where(keep, modified - scaled, -torch.inf)  # (b, num_heads, num_tokens, num_tokens)
        self._sdpa((q, k, v), {"attn_mask": mask, "scale": scale}, out[0])

    def _multi_head_attention(self, func, args: tuple, kwargs: dict) -> Any:
        """nn.MultiheadAttention's functional form: every stage from its own arguments, its output its own."""
        out = func(*args, **kwargs)
        call = _bind(func, args, kwargs)
        if call is None or call.get("key_padding_mask") is not None:
            return out
        x = call["query"].transpose(0, 1)  # (b, num_tokens, embed_dim)
        num_heads, embed_dim = int(call["num_heads"]), int(call["embed_dim_to_check"])
        if call.get("use_separate_proj_weight"):
            weights = [call["q_proj_weight"], call["k_proj_weight"], call["v_proj_weight"]]
        else:
            weights = list(call["in_proj_weight"].chunk(3))
        biases = list(call["in_proj_bias"].chunk(3)) if call.get("in_proj_bias") is not None else [None] * 3
        head = _Head(reconstructed={"queries", "keys", "values", "scores", "scaled_scores", "weights", "context"})
        b, n = x.shape[0], x.shape[1]
        for stage, weight, bias in zip(("queries", "keys", "values"), weights, biases):
            projected = F.linear(x, weight, bias)  # (b, num_tokens, embed_dim)
            head.found[stage] = projected.view(b, n, num_heads, embed_dim // num_heads).transpose(1, 2)
            head.sources[stage] = stage
        mask = call.get("attn_mask")
        head.found.update(attend(head.found["queries"], head.found["keys"], scale=(embed_dim // num_heads) ** -0.5,
                                 mask=mask, is_causal=bool(call.get("is_causal")) and mask is None,
                                 mask_means_keep=False))
        head.found["context"] = head.found["weights"] @ head.found["values"]  # (b, num_heads, num_tokens, head_dim)
        head.softmax_dim = head.softmax_axis = 3
        head.roles = ("queries", "keys")
        self.heads.append(head)
        return out

    # -- the result -------------------------------------------------------------------------------

    def result(self, x: torch.Tensor, returned: Returned) -> Capture:
        out = returned.output
        batch = x.shape[0] if x.dim() == 3 else 1
        found: dict[str, torch.Tensor] = {}
        native: dict[str, tuple[int, ...]] = {}
        for head in self.heads:
            _raw_scores(head)
        for stage in STAGES[1:-1]:
            tensors = [h.found.get(stage) for h in self.heads]
            if not tensors or any(t is None for t in tensors):
                continue
            canonical = [_canonical(t, batch) for t in tensors]
            if any(c is None for c in canonical) or len({c.shape[:1] + c.shape[2:] for c in canonical}) != 1:
                continue
            found[stage] = canonical[0] if len(canonical) == 1 else torch.cat(canonical, dim=1)
            native[stage] = tuple(tensors[0].shape) if len(tensors) == 1 else tuple(found[stage].shape)
        for stage, tensor in self.explicit.items():
            canonical = _canonical(tensor, batch) if stage not in ("inputs", "output") else _canonical_tokens(tensor)
            if canonical is not None:
                found[stage], native[stage] = canonical, tuple(tensor.shape)
        found["inputs"], native["inputs"] = _canonical_tokens(x), tuple(x.shape)
        output_is_context = False
        if isinstance(out, torch.Tensor):
            output = _canonical_tokens(out)
            if output is not None and output.shape[-2] == found["inputs"].shape[-2]:  # one row per token
                found["output"], native["output"] = output, tuple(out.shape)
            output_is_context = len(self.heads) == 1 and self.heads[0].output is out
        first = self.heads[0] if self.heads else _Head()
        prescale = {}
        for head in self.heads:
            prescale.update(head.prescale)
        sources = {s: (first.sources.get(s) if s in found else None) for s in ("queries", "keys", "values")}
        reconstructed = sorted(set().union(*(h.reconstructed for h in self.heads)) & set(found)) if self.heads else []
        missing = [s for s in STAGES if s not in found and s != "weights_applied"]
        if any(h.found.get("weights_applied", 0) is None for h in self.heads):
            missing.append("weights_applied")
        return Capture(found, native, sources, first.softmax_dim, missing, prescale, reconstructed,
                       first.roles, output_is_context, first.softmax_axis, self.out_inputs, returned.description,
                       returned)


_SDPA_PARAMETERS = ("query", "key", "value", "attn_mask", "dropout_p", "is_causal", "scale", "enable_gqa")
_WEIGHTS_TIMES_VALUES = [sorted([a, b], key=str) for a in _ATTENTION for b in _ACTIVATIONS]


def attend(queries: torch.Tensor, keys: torch.Tensor, *, scale: float, mask: torch.Tensor | None = None,
           is_causal: bool = False, mask_means_keep: bool = True) -> dict[str, torch.Tensor]:
    """Scores, scaled scores and weights as an attention kernel computes them from its inputs.

    `mask_means_keep`: SDPA's boolean mask is True where a query may look; nn.MultiheadAttention's
    is True where it may not. A float mask is added to the scaled scores.
    """
    if keys.shape[-3] != queries.shape[-3] and queries.dim() >= 3:  # grouped keys (enable_gqa)
        keys = keys.repeat_interleave(queries.shape[-3] // keys.shape[-3], dim=-3)
    scores = queries @ keys.mT  # (b, num_heads, num_tokens, num_tokens)
    scaled = scores * scale
    n_query, n_key = scaled.shape[-2:]
    if is_causal:
        hidden = torch.ones(n_query, n_key, dtype=torch.bool).triu(1)
        scaled = scaled.masked_fill(hidden, -torch.inf)
    if mask is not None and mask.dtype == torch.bool:
        scaled = scaled.masked_fill(~mask if mask_means_keep else mask, -torch.inf)
    elif mask is not None:
        scaled = scaled + mask
    weights = torch.softmax(scaled, dim=-1)
    if mask_means_keep:  # SDPA gives a query that may see no key zero weights, not softmax's 0/0
        weights = weights.masked_fill(torch.isneginf(scaled).all(dim=-1, keepdim=True), 0.0)
    return {"scores": scores, "scaled_scores": scaled, "weights": weights}


@contextmanager
def _flex_attention_eager() -> Iterator[None]:
    """FlexAttention on its eager path while capturing: its default path compiles the operator with
    torch.compile, which then has to trace the recorder's __torch_function__ and fails; the eager
    path computes the same attention and hands the recorder the operator's arguments."""
    before = flex_attention_api._FLEX_ATTENTION_DISABLE_COMPILE_DEBUG
    flex_attention_api._FLEX_ATTENTION_DISABLE_COMPILE_DEBUG = True
    try:
        yield
    finally:
        flex_attention_api._FLEX_ATTENTION_DISABLE_COMPILE_DEBUG = before


def _raw_scores(head: _Head) -> None:
    """Make "scores" the product of the unscaled queries and keys (see `Capture`)."""
    seen = head.found.get("scores")
    if seen is None or not head.prescale or "scores" in head.reconstructed:
        return
    total = math.prod(head.prescale.values())
    if total != 0.0 and math.isfinite(total) and math.isfinite(max_abs_or_nan(seen)):
        head.found["scores"] = seen / total
        return
    del head.found["scores"]  # a zero factor: gone, never guessed


def _canonical(tensor: torch.Tensor, batch: int) -> torch.Tensor | None:
    """A per-head stage as (batch, heads, tokens, ·): 2-D and 3-D modules gain size-1 axes,
    a merged (batch * heads, ...) axis (nn.MultiheadAttention's bmm) is split again."""
    if tensor.dim() == 2:
        return tensor[None, None]
    if tensor.dim() == 3 and tensor.shape[0] == batch:
        return tensor.unsqueeze(1)
    if tensor.dim() == 3 and tensor.shape[0] % batch == 0:
        return tensor.reshape(batch, tensor.shape[0] // batch, *tensor.shape[1:])
    if tensor.dim() == 4:
        return tensor
    while tensor.dim() > 4 and tensor.shape[0] == 1:
        tensor = tensor[0]
    return tensor if tensor.dim() == 4 else None


def _canonical_axis(dim: int, tensor: torch.Tensor, batch: int) -> int:
    """A dim of a per-head stage in the module's own rank, as the axis of its canonical view."""
    if tensor.dim() == 2:
        return dim + 2
    if tensor.dim() == 3:
        return dim + 1 if dim > 0 else (0 if tensor.shape[0] == batch else 1)
    return dim


def _canonical_tokens(tensor: torch.Tensor) -> torch.Tensor | None:
    """The inputs or the output as (batch, tokens, width)."""
    if tensor.dim() == 2:
        return tensor[None]
    if tensor.dim() == 1:
        return tensor[None, :, None]
    while tensor.dim() > 3 and tensor.shape[0] == 1:
        tensor = tensor[0]
    return tensor if tensor.dim() == 3 else None


def max_abs_or_nan(t: torch.Tensor) -> float:
    """max |t| in one pass without a temporary (inf/nan when the tensor holds one)."""
    if t.numel() == 0:
        return 0.0
    lo, hi = torch.aminmax(t)
    return max(-float(lo), float(hi))


def _is_fused(name: str, param: torch.Tensor) -> bool:
    """A fused query-key-value projection weight: (3 * d, d_in) as nn.Linear stores it, (d_in, 3 * d) as
    GPT-2's Conv1D does, or its bias."""
    leaf = name.lower().replace(".weight", "").replace(".bias", "")
    fused_axis = param.shape[0] if param.dim() == 1 or param.shape[0] > param.shape[-1] else param.shape[-1]
    return any(key in leaf for key in ("qkv", "c_attn", "in_proj", "query_key_value")) and fused_axis % 3 == 0


def _is_inplace(name: str) -> bool:
    return (name.endswith("_") and not name.startswith("_")) or name in (
        "__iadd__", "__isub__", "__imul__", "__itruediv__", "__idiv__")


def _bind(func: Any, args: tuple, kwargs: dict) -> dict[str, Any] | None:
    try:
        return dict(inspect.signature(func).bind(*args, **kwargs).arguments)
    except (TypeError, ValueError):
        return None


def _replayed(func: Any, args: tuple, kwargs: dict, tensor: torch.Tensor, substitute: torch.Tensor,
              outputs: list[torch.Tensor]) -> list[torch.Tensor | None] | None:
    """`func` once more with `substitute` in place of `tensor` (the mode is off inside its handler),
    matched to `outputs` one for one; None where the replay does not fit."""
    if func is None:
        return None

    def swap(value):
        if value is tensor:
            return substitute
        if isinstance(value, (tuple, list)):
            return type(value)(swap(v) for v in value)
        return value

    try:
        replay = func(*swap(args), **{k: swap(v) for k, v in kwargs.items()})
    except (RuntimeError, TypeError, ValueError, IndexError):
        return None
    replays = _tensors([replay])
    if len(replays) != len(outputs):
        return None
    return [r if r.shape == o.shape else None for r, o in zip(replays, outputs)]


def _one_dim(dim: Any, ndim: int) -> int | None:
    """A reduction's dim as a non-negative int, or None when it is not exactly one dim."""
    if isinstance(dim, (tuple, list)) and len(dim) == 1:
        dim = dim[0]
    if isinstance(dim, bool) or not isinstance(dim, int) or ndim == 0:
        return None
    return dim % ndim


def _same(a: torch.Tensor, b: torch.Tensor) -> bool:
    """The same logits: one tensor, or (written out twice) equal values."""
    return a is b or (a.shape == b.shape and a.dtype == b.dtype and bool(torch.equal(a, b)))


def _same_values(a: torch.Tensor, b: torch.Tensor) -> bool:
    """The weights as multiplied equal the softmax's output (eval-mode dropout returns them as they are)."""
    return a is b or (a.shape == b.shape and a.data_ptr() == b.data_ptr() and a.stride() == b.stride()) or (
        a.shape == b.shape and bool(torch.equal(a, b)))


def _broadcasts_along(total: torch.Tensor, out: torch.Tensor, dim: int) -> bool:
    """Whether dividing by `total` divides each slice along `dim` by its own sum (keepdim or unsqueezed)."""
    shape = (1,) * (out.dim() - total.dim()) + tuple(total.shape)
    return len(shape) == out.dim() and shape[dim] == 1 and all(
        shape[i] == out.shape[i] for i in range(out.dim()) if i != dim)
