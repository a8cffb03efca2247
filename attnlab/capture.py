"""Capture every stage of a self-attention forward pass, without the plugin's help.

A variant is the source's class pasted verbatim: it imports nothing from attnlab and names no
stages. So the stages are found by where a tensor sits in the data flow, not by variable names
or call order (the source computes keys before queries):

- a product with a projection parameter (`x @ W_key`, `nn.Linear`) makes a projection,
- the first product of two projection-derived tensors is the scores; its row operand is in the
  queries position and its column operand in the keys position,
- the softmax input is the scaled scores, its output the weights; a hand-written softmax
  (`exp(s - s.max(dim, keepdim=True).values) / exp(...).sum(dim, keepdim=True)`, `s.exp() /
  s.exp().sum(dim, keepdim=True)`, `log_softmax(s, dim).exp()`) counts as one, with the tensor
  the max was subtracted from as its input (a softmax is shift-invariant),
- the product of the weights with a projection is the context; that projection is the values.

A projection multiplied or divided by a scalar (a Python number or a one-element tensor) before
the score product stays a projection: `(x @ W_query) * d_k ** -0.5`, `x @ (W_query / 8)`. The
factor is recorded in `Capture.prescale` and the stage holds the UNscaled tensor, so the
queries stage is `x @ W_query` whichever way the variant wrote it. See `Capture` for what the
scores stage holds then.

Provenance is recorded separately: `sources["queries"]` says which parameter made the tensor in
the queries position, so `keys @ keys.T` is seen as keys in the queries position, not guessed
away. A torch.overrides.TorchFunctionMode sees every torch call with its arguments; tensors are
tagged in a side table (weak references, no copies) and tags follow shape ops.

Extra tensors capture makes, all only in the case named: the raw (n x n) scores when the queries
or keys were pre-scaled, or when the module scaled its scores tensor in place (see `Capture`);
the (n x n) softmax input `s * c` for `exp((s - s.max(dim)) * c) / ...`, which the module never
made; an (n x d) product `x @ W` for a pre-scaled weight `x @ (W * c)`; an (n x d) division
for a projection scaled in place (`q *= c`). Everything else is the module's own tensor.

Not recognised (the stages are reported missing or as seen, never guessed): a scaled input
(`x * c` before the projections: a different input, so queries differ), a softmax normalised
by a multiply with a reciprocal (`e * e.sum(dim, keepdim=True).reciprocal()`), and in-place
ops other than a scalar multiply/divide on the scores (`scores.masked_fill_`), which overwrite
the scores stage.
"""

from __future__ import annotations

import math
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
    # factors the queries / keys were multiplied by before the score product, e.g. {"queries": 0.125}
    prescale: dict[str, float] = field(default_factory=dict)

    # What "scores" holds: always the product of the UNscaled queries and keys (q @ k.T), so
    # `divergence_scores` compares like with like and `scale_observed` (the least-squares factor
    # from scores to the softmax input) is the EFFECTIVE scale: the pre-factors times any factor
    # applied after the product. With no pre-factor that is the product the module computed (no
    # copy). With one, the module never computed the raw product: capture divides the product it
    # did compute by the recorded factors (one elementwise pass, float32 rounding within the
    # scores tolerance), the one extra (n x n) tensor capture holds, only in that case. Had the
    # scores been kept as the product seen, a correct pre-scaled variant would "diverge" at the
    # scores and its effective scale would be split across two numbers.


class _Tag(NamedTuple):
    kind: str  # "input" | "param" | "proj" | "scores" | "derived" (from scores) | "weights" | "context"
    role: str | None = None  # for "param"/"proj": the projection role of the parameter
    factor: float = 1.0  # for "param"/"proj": the scalar the tensor was multiplied by since the projection
    base: torch.Tensor | None = None  # the same tensor without that factor (same shape); None: divide on use
    note: tuple | None = None  # "derived" on the way to a hand-written softmax: ("max", logits),
    #   ("shifted"|"exp", logits, factor), ("expsum", logits, factor, dim), ("logsoftmax", logits, dim);
    #   factor: a scalar applied after the max-subtraction, so the softmax input is logits * factor


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
# ops that commute with a scalar factor: a pre-scaled projection keeps its factor through them
_KEEP_FACTOR = _SHAPE_OPS | {"roll", "flip", "narrow", "select", "index_select"}
_MUL = {"mul", "multiply", "mul_", "multiply_"}
_DIV = {"div", "divide", "true_divide", "div_", "divide_", "true_divide_"}
_NEG = {"neg", "negative", "neg_", "negative_"}
_MAX = {"max", "amax"}
_SUB = {"sub", "subtract"}
_LOGITS = ("scores", "derived")

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
        self.prescale: dict[str, float] = {}
        self._softmax_dropped = 0
        self._scores_inplace = 1.0  # scalar factor applied IN PLACE to the scores tensor itself
        self._score_operands: tuple | None = None  # the first score product's operands, letters, output letters
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
            self._product(func, name, args, kwargs, out)
        elif name in ("softmax", "log_softmax"):
            self._softmax(name, args, kwargs, out)
        elif not (self._scaling(name, args, kwargs, out) or self._manual_softmax(name, args, kwargs, out)):
            self._propagate(func, name, args, kwargs, out)
        return out

    def _propagate(self, func, name: str, args: tuple, kwargs: dict, out: Any) -> None:
        outputs = _tensors([out])
        if not outputs:
            return
        tagged = [(t, tag) for t in _tensors([*args, *kwargs.values()]) if (tag := self._tag(t)) is not None]
        if not tagged:
            return
        source, tag = min(tagged, key=lambda pair: _PRIORITY.index(pair[1].kind))
        if tag.kind in _LOGITS and name not in _SHAPE_OPS:
            tag = _Tag("derived")
        elif tag.factor != 1.0:  # a pre-scaled projection: the factor survives only ops that commute with it
            base = None
            if name in _KEEP_FACTOR and len(outputs) == 1 and tag.base is not None:
                base = _replay(func, args, kwargs, source, tag.base)
                base = base if isinstance(base, torch.Tensor) and base.shape == outputs[0].shape else None
            tag = tag._replace(base=base) if name in _KEEP_FACTOR and len(outputs) == 1 else _Tag(tag.kind, tag.role)
        for tensor in outputs:
            self._set_tag(tensor, tag)

    def _scaling(self, name: str, args: tuple, kwargs: dict, out: Any) -> bool:
        """A projection (or projection parameter) times a scalar: keep its provenance, record the factor.

        Also notes a scalar applied in place to the scores tensor itself (`scores /= d_k ** 0.5`),
        which overwrites the scores the module computed.
        """
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
            tag = self._tag(tensor) if isinstance(tensor, torch.Tensor) else None
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
                self._set_tag(out, tag._replace(factor=tag.factor * factor, base=base, note=None))
                return True
            if tag.kind == "derived" and tag.note and tag.note[0] == "shifted" and out is not tensor:
                # (s - s.max(dim)) / sqrt(d_k): the softmax input is s / sqrt(d_k), shifted per row
                self._set_tag(out, _Tag("derived", note=("shifted", tag.note[1], tag.note[2] * factor)))
                return True
            if tag.kind == "scores" and out is tensor and out is self.found.get("scores"):
                self._scores_inplace *= factor
                self._set_tag(out, _Tag("derived"))
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

    def _manual_softmax(self, name: str, args: tuple, kwargs: dict, out: Any) -> bool:
        """exp of scores-derived logits (max-shifted or not), divided by its own sum along one dim."""
        if "weights" in self.found or not args or not isinstance(args[0], torch.Tensor):
            return False
        tag = self._tag(args[0])
        if tag is None or tag.kind not in _LOGITS:
            return False
        note = tag.note or ("",)
        if name in _MAX:
            self._tag_all(out, _Tag("derived", note=("max", args[0])))
            return True
        if name in _SUB and len(args) == 2 and "alpha" not in kwargs and isinstance(args[1], torch.Tensor):
            other = self._tag(args[1])
            if other is not None and other.note and other.note[0] == "max" and other.note[1] is args[0]:
                self._set_tag(out, _Tag("derived", note=("shifted", args[0], 1.0)))
                return True
            return False
        if name == "exp":
            if note[0] == "logsoftmax":
                self._record_softmax(note[1], note[2], out)
                return True
            logits, factor = (note[1], note[2]) if note[0] == "shifted" else (args[0], 1.0)
            self._set_tag(out, _Tag("derived", note=("exp", logits, factor)))
            return True
        if name == "sum" and note[0] == "exp":
            dim = _one_dim(args[1] if len(args) > 1 else kwargs.get("dim", kwargs.get("axis")), args[0].dim())
            if dim is None:
                return False
            self._set_tag(out, _Tag("derived", note=("expsum", note[1], note[2], dim)))
            return True
        if name in _DIV and len(args) == 2 and note[0] == "exp" and isinstance(args[1], torch.Tensor):
            other = self._tag(args[1])
            if other is None or not other.note or other.note[0] != "expsum":
                return False
            logits, factor, dim = other.note[1], other.note[2], other.note[3]
            if not (factor == note[2] and _same(logits, note[1]) and _broadcasts_along(args[1], out, dim)):
                return False
            if factor != 1.0:  # scaled after the shift: the module never made the softmax input itself,
                logits = logits * factor  # so it is made once here, an extra (n x n) only in this case
            self._record_softmax(logits, dim, out)
            return True
        return False

    def _tag_all(self, out: Any, tag: _Tag) -> None:
        for tensor in _tensors([out]):
            self._set_tag(tensor, tag)

    def _softmax(self, name: str, args: tuple, kwargs: dict, out: torch.Tensor) -> None:
        source = args[0] if args else kwargs.get("input")
        tag = self._tag(source) if isinstance(source, torch.Tensor) else None
        if tag is None or tag.kind not in _LOGITS or "weights" in self.found:
            self._propagate(None, name, args, kwargs, out)
            return
        dim = kwargs.get("dim", args[1] if len(args) > 1 else None)
        if dim is None:  # F.softmax's legacy implicit dim
            dim = 0 if source.dim() in (0, 1, 3) else 1
        logits = source
        if tag.note and tag.note[0] == "shifted":  # softmax(c * (s - max)) == softmax(c * s)
            logits = tag.note[1] if tag.note[2] == 1.0 else tag.note[1] * tag.note[2]
        if name == "log_softmax":  # a softmax only once exp() is taken
            self._set_tag(out, _Tag("derived", note=("logsoftmax", logits, dim % source.dim())))
            return
        self._record_softmax(logits, dim, out)

    def _record_softmax(self, logits: torch.Tensor, dim: int, weights: torch.Tensor) -> None:
        self.softmax_dim = dim % logits.dim()
        self._softmax_dropped = logits.dim() - _two_dim(logits).dim()  # leading size-1 batch dims
        self.found["scaled_scores"] = logits
        self.found["weights"] = weights
        self._set_tag(weights, _Tag("weights"))

    def _product(self, func, name: str, args: tuple, kwargs: dict, out: torch.Tensor) -> None:
        spec = _as_einsum(name, args)
        if spec is None or not isinstance(out, torch.Tensor):
            return
        operands, letters, out_letters = spec
        tags = [self._tag(t) for t in operands]
        kinds = [t.kind if t is not None else None for t in tags]
        if "param" in kinds:
            i = kinds.index("param")
            param = tags[i]
            if param.factor == 1.0:
                self._set_tag(out, _Tag("proj", param.role))
                return
            # x @ (W_query * c): the product once more with the unscaled parameter, (n x d) only
            base = _replay(func, args, kwargs, operands[i], param.base) if param.base is not None else None
            base = base if isinstance(base, torch.Tensor) and base.shape == out.shape else None
            self._set_tag(out, _Tag("proj", param.role, param.factor, base))
        elif all(k in _ACTIVATIONS for k in kinds) and "scores" not in self.found:
            self._scores(operands, letters, out_letters, tags, out)
            self._score_operands = (operands, letters, out_letters)
        elif all(k in _ACTIVATIONS for k in kinds) and self._same_product(operands, letters, out_letters):
            self._set_tag(out, _Tag("scores"))  # the scores written out again (a softmax's denominator)
        elif "context" not in self.found and sorted(kinds, key=str) in _WEIGHTS_TIMES_VALUES:
            self._context(operands, letters, out_letters, tags, out)

    def _same_product(self, operands, letters, out_letters) -> bool:
        first = self._score_operands
        if first is None or (letters, out_letters) != (first[1], first[2]):
            return False
        return all(a is b or (a.data_ptr() == b.data_ptr() and a.shape == b.shape and a.stride() == b.stride()
                              and a.dtype == b.dtype) for a, b in zip(operands, first[0]))  # `k.T` is a new view

    def _scores(self, operands, letters, out_letters, tags, out) -> None:
        row, col = out_letters[-2], out_letters[-1]
        for stage, letter in (("queries", row), ("keys", col)):
            i = 0 if letter in letters[0][-2:] else 1
            operand, tag = operands[i], tags[i]
            if tag.factor != 1.0:  # pre-scaled: the stage is the projection itself, the factor is noted
                if tag.base is not None:
                    operand = tag.base
                elif tag.factor != 0.0:
                    operand = operand / tag.factor  # scaled in place: an (n x d) copy, the only way back
                self.prescale[stage] = tag.factor
            self.found[stage] = _oriented(operand, letters[i], letter)
            self.sources[stage] = tag.role if tag.kind == "proj" else None
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
        self._raw_scores()
        stages = {**self.found, **self.explicit, "inputs": x, "context": out}
        stages = {s: _two_dim(stages[s]) for s in STAGES if s in stages}
        sources = {s: (self.sources.get(s) if s in stages else None) for s in ("queries", "keys", "values")}
        missing = [s for s in STAGES if s not in stages]
        softmax_dim = self.softmax_dim
        if softmax_dim is not None and softmax_dim >= self._softmax_dropped:  # relative to the 2-D stage
            softmax_dim -= self._softmax_dropped
        return Capture(stages, sources, softmax_dim, missing, dict(self.prescale))

    def _raw_scores(self) -> None:
        """Make "scores" the product of the unscaled queries and keys (see `Capture`).

        The product the module computed divided by the factors it carried: one (n x n) pass. Only
        when that cannot work (a zero factor, or a product that overflowed) is q @ k.T computed
        again from the captured stages, an (n x n x d) matmul.
        """
        seen = self.found.get("scores")
        if seen is None or "scores" in self.explicit or (not self.prescale and self._scores_inplace == 1.0):
            return
        total = math.prod(self.prescale.values()) * self._scores_inplace
        with torch.no_grad():
            if total != 0.0 and math.isfinite(total) and math.isfinite(max_abs_or_nan(seen)):
                self.found["scores"] = seen / total  # the one extra (n x n) tensor, only in this case
                return
            if self.prescale and "queries" in self.found and "keys" in self.found:
                raw = torch.matmul(self.found["queries"], self.found["keys"].mT)
                if raw.shape == seen.shape:
                    self.found["scores"] = raw
                    return
            del self.found["scores"]  # overwritten in place by a zero factor: gone, never guessed


_WEIGHTS_TIMES_VALUES = [sorted([a, b], key=str) for a in _ATTENTION for b in _ACTIVATIONS]


def max_abs_or_nan(t: torch.Tensor) -> float:
    """max |t| in one pass without a temporary (inf/nan when the tensor holds one)."""
    if t.numel() == 0:
        return 0.0
    lo, hi = torch.aminmax(t)
    return max(-float(lo), float(hi))


def _replay(func: Any, args: tuple, kwargs: dict, tensor: torch.Tensor, base: torch.Tensor) -> Any:
    """`func` once more with `base` in place of `tensor` (the mode is off inside its handler)."""
    if func is None:
        return None

    def swap(value):
        if value is tensor:
            return base
        if isinstance(value, (tuple, list)):
            return type(value)(swap(v) for v in value)
        return value

    try:
        return func(*swap(args), **{k: swap(v) for k, v in kwargs.items()})
    except (RuntimeError, TypeError, ValueError, IndexError):
        return None


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


def _broadcasts_along(total: torch.Tensor, out: torch.Tensor, dim: int) -> bool:
    """Whether dividing by `total` divides each slice along `dim` by its own sum (keepdim or unsqueezed)."""
    shape = (1,) * (out.dim() - total.dim()) + tuple(total.shape)
    return len(shape) == out.dim() and shape[dim] == 1 and all(
        shape[i] == out.shape[i] for i in range(out.dim()) if i != dim)


def _two_dim(tensor: torch.Tensor) -> torch.Tensor:
    """Drop leading size-1 batch dims (a view): stages are (n_tokens, ·)."""
    while tensor.dim() > 2 and tensor.shape[0] == 1:
        tensor = tensor[0]
    return tensor
