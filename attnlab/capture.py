"""Capture every stage of a self-attention forward pass, without the plugin's help.

A variant is the source's class pasted verbatim: it imports nothing from attnlab and names no
stages. So the stages are found by where a tensor sits in the data flow, not by variable names
or call order (the source computes keys before queries):

- a product with a projection parameter (`x @ W_key`, `nn.Linear`) makes a projection,
- the first product of two projection-derived tensors is the scores; its row operand is in the
  queries position and its column operand in the keys position,
- the softmax input is the scaled scores, its output the weights,
- the product of the weights with a projection is the context; that projection is the values.

Provenance is recorded separately: `sources["queries"]` says which parameter made the tensor in
the queries position, so `keys @ keys.T` is seen as keys in the queries position, not guessed
away. A torch.overrides.TorchFunctionMode sees every torch call with its arguments; tensors are
tagged in a side table (weak references, no copies) and tags follow shape ops.
"""

from __future__ import annotations

import weakref
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import torch
from torch import nn
from torch.overrides import TorchFunctionMode

from attnlab.stages import STAGES
from attnlab.weights import projection_role


@dataclass
class Capture:
    stages: dict[str, torch.Tensor]  # subset of STAGES; "inputs" and "context" always present; 2-D, no copies
    sources: dict[str, str | None]  # "queries"/"keys"/"values" -> projection_role of the parameter that made it
    softmax_dim: int | None  # the dim the softmax normalised over, non-negative; None when no softmax was seen
    missing: list[str] = field(default_factory=list)  # stages that could not be found (never guessed)


class _Tag(NamedTuple):
    kind: str  # "input" | "param" | "proj" | "scores" | "derived" (from scores) | "weights" | "context"
    role: str | None = None  # for "param"/"proj": the projection role of the parameter


_ACTIVATIONS = ("input", "proj")  # what queries, keys and values are made of
_ATTENTION = ("scores", "derived", "weights")  # what the weights are made of
_PRIORITY = ("weights", "derived", "scores", "proj", "param", "input", "context")
_TAP_KINDS = {"inputs": "input", "scores": "scores", "scaled_scores": "derived", "weights": "weights",
              "context": "context"}  # queries, keys, values: "proj"
_PRODUCTS = {"matmul", "__matmul__", "__rmatmul__", "mm", "bmm", "einsum", "linear"}
_SHAPE_OPS = {
    "T", "mT", "t", "transpose", "permute", "view", "reshape", "contiguous", "clone", "detach",
    "squeeze", "unsqueeze", "flatten", "expand", "to", "float", "__getitem__",
}

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
        with torch.no_grad(), recorder:
            out = module(x)
    finally:
        _ACTIVE.reset(token)
    if isinstance(out, (tuple, list)):
        out = out[0]
    return recorder.result(x, out)


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


def _as_einsum(name: str, args: tuple) -> tuple[list[torch.Tensor], list[str], str] | None:
    """Any two-operand product as (operands, their index letters, output letters), last two dims."""
    if name == "einsum":
        operands = list(args[1]) if len(args) == 2 and isinstance(args[1], (tuple, list)) else list(args[1:])
        equation = str(args[0]).replace(" ", "").replace("...", "")
        if len(operands) != 2 or "->" not in equation:
            return None
        inputs, out = equation.split("->")
        letters = inputs.split(",")
        if len(letters) != 2 or min(len(out), *(len(s) for s in letters)) < 2:
            return None
        if not (set(letters[0]) & set(letters[1])) - set(out):  # no contraction: not a product
            return None
        return operands, letters, out
    a, b = (args[1], args[0]) if name == "__rmatmul__" else (args[0], args[1])
    if not (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)) or min(a.dim(), b.dim()) < 2:
        return None
    if name == "linear":  # F.linear(x, W) = x @ W.T
        return [a, b], ["ij", "kj"], "ik"
    return [a, b], ["ij", "jk"], "ik"


def _oriented(tensor: torch.Tensor, letters: str, first: str) -> torch.Tensor:
    """The operand as a 2-D view whose rows are indexed by `first` (a view, never a copy)."""
    return tensor if letters[-2] == first else tensor.mT


class _Recorder(TorchFunctionMode):
    """Tags tensors with their provenance and records each stage as the data flow reveals it."""

    def __init__(self, module: nn.Module, x: torch.Tensor) -> None:
        super().__init__()
        self._params = {id(p): _Tag("param", projection_role(name)) for name, p in module.named_parameters()}
        self._tags: dict[int, tuple[weakref.ref, _Tag]] = {}
        self.found: dict[str, torch.Tensor] = {}
        self.explicit: dict[str, torch.Tensor] = {}
        self.sources: dict[str, str | None] = {}
        self.softmax_dim: int | None = None
        self._set_tag(x, _Tag("input"))

    def _set_tag(self, tensor: torch.Tensor, tag: _Tag) -> None:
        self._tags[id(tensor)] = (weakref.ref(tensor), tag)

    def _tag(self, tensor: torch.Tensor) -> _Tag | None:
        entry = self._tags.get(id(tensor))
        if entry is not None and entry[0]() is tensor:
            return entry[1]
        return self._params.get(id(tensor))

    def tapped(self, stage: str, tensor: torch.Tensor) -> None:
        """Record the stage, and tag the tensor as that stage so the data flow after it is read too."""
        self.explicit[stage] = tensor
        kind = _TAP_KINDS.get(stage, "proj")
        old = self._tag(tensor)
        self._set_tag(tensor, _Tag(kind, old.role if old is not None and kind == "proj" else None))

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        name = _name(func)
        if name in _PRODUCTS:
            self._product(name, args, out)
        elif name == "softmax":
            self._softmax(args, kwargs, out)
        else:
            self._propagate(name, args, kwargs, out)
        return out

    def _propagate(self, name: str, args: tuple, kwargs: dict, out: Any) -> None:
        outputs = _tensors([out])
        if not outputs:
            return
        tags = [t for t in map(self._tag, _tensors([*args, *kwargs.values()])) if t is not None]
        if not tags:
            return
        tag = min(tags, key=lambda t: _PRIORITY.index(t.kind))
        if tag.kind == "scores" and name not in _SHAPE_OPS:
            tag = _Tag("derived")
        for tensor in outputs:
            self._set_tag(tensor, tag)

    def _softmax(self, args: tuple, kwargs: dict, out: torch.Tensor) -> None:
        source = args[0] if args else kwargs.get("input")
        tag = self._tag(source)
        if tag is None or tag.kind not in ("scores", "derived") or "weights" in self.found:
            self._propagate("softmax", args, kwargs, out)
            return
        dim = kwargs.get("dim", args[1] if len(args) > 1 else None)
        if dim is None:  # F.softmax's legacy implicit dim
            dim = 0 if source.dim() in (0, 1, 3) else 1
        self.softmax_dim = dim % source.dim()
        self.found["scaled_scores"] = source
        self.found["weights"] = out
        self._set_tag(out, _Tag("weights"))

    def _product(self, name: str, args: tuple, out: torch.Tensor) -> None:
        spec = _as_einsum(name, args)
        if spec is None or not isinstance(out, torch.Tensor):
            return
        operands, letters, out_letters = spec
        tags = [self._tag(t) for t in operands]
        kinds = [t.kind if t is not None else None for t in tags]
        if "param" in kinds:
            self._set_tag(out, _Tag("proj", tags[kinds.index("param")].role))
        elif all(k in _ACTIVATIONS for k in kinds) and "scores" not in self.found:
            self._scores(operands, letters, out_letters, tags, out)
        elif "context" not in self.found and sorted(kinds, key=str) in _WEIGHTS_TIMES_VALUES:
            self._context(operands, letters, out_letters, tags, out)

    def _scores(self, operands, letters, out_letters, tags, out) -> None:
        row, col = out_letters[-2], out_letters[-1]
        for stage, letter in (("queries", row), ("keys", col)):
            i = 0 if letter in letters[0][-2:] else 1
            self.found[stage] = _oriented(operands[i], letters[i], letter)
            self.sources[stage] = tags[i].role if tags[i].kind == "proj" else None
        self.found["scores"] = out
        self._set_tag(out, _Tag("scores"))

    def _context(self, operands, letters, out_letters, tags, out) -> None:
        w = 0 if tags[0].kind in _ATTENTION else 1
        v = 1 - w
        query_letter = next(c for c in letters[w][-2:] if c in out_letters[-2:])
        key_letter = next(c for c in letters[w][-2:] if c != query_letter)
        self.found.setdefault("weights", _oriented(operands[w], letters[w], query_letter))
        self.found["values"] = _oriented(operands[v], letters[v], key_letter)
        self.sources["values"] = tags[v].role if tags[v].kind == "proj" else None
        self.found["context"] = out
        self._set_tag(out, _Tag("context"))

    def result(self, x: torch.Tensor, out: torch.Tensor) -> Capture:
        stages = {**self.found, **self.explicit, "inputs": x, "context": out}
        stages = {s: _two_dim(stages[s]) for s in STAGES if s in stages}
        sources = {s: (self.sources.get(s) if s in stages else None) for s in ("queries", "keys", "values")}
        missing = [s for s in STAGES if s not in stages]
        return Capture(stages, sources, self.softmax_dim, missing)


_WEIGHTS_TIMES_VALUES = [sorted([a, b], key=str) for a in _ATTENTION for b in _ACTIVATIONS]


def _two_dim(tensor: torch.Tensor) -> torch.Tensor:
    """Drop leading size-1 batch dims (a view): stages are (n_tokens, ·)."""
    while tensor.dim() > 2 and tensor.shape[0] == 1:
        tensor = tensor[0]
    return tensor
