"""Where each tensor of a forward comes from: a side table of tags (weak references, no copies),
the score products found so far, and how tags pass through ops that keep a tensor's meaning
(views, splits, a scalar factor on a projection)."""

from __future__ import annotations

import math
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from attnlab.capture.buffers import Memory
from attnlab.capture.tags import Tag
from attnlab.capture.torch_calls import (
    DIV,
    FIRST_ONLY,
    FRESH,
    JOIN,
    KEEP_FACTOR,
    MUL,
    NEG,
    NORMS,
    SHAPE_OPS,
    replayed,
    tensors_in,
)
from attnlab.modules import hf_record
from attnlab.modules.roles import QKV_ROLES, FusedLayout, fused_layout, module_roles, projection_role

ACTIVATIONS = ("input", "proj")  # what queries, keys and values are made of
ATTENTION = ("scores", "derived", "weights")  # what the weights are made of
LOGITS = ("scores", "derived")
_PRIORITY = ("weights", "derived", "scores", "proj", "param", "input", "context", "given")
TERMS = ("input", "param", "proj", "given")  # what a term the module computes from its own inputs and weights, or
# its model hands it for the scores (`hf_record.given_biases`), is tagged
_ADD = {"add", "add_", "__add__", "__radd__", "__iadd__", "sub", "sub_", "subtract", "__sub__", "__isub__"}
_ADD_EITHER_SIDE = {"add", "__add__", "__radd__"}
_MASK_FILL = {"masked_fill", "masked_fill_", "where"}
_TAP_KINDS = {"inputs": "input", "scores": "scores", "scaled_scores": "derived", "weights": "weights",
              "weights_applied": "weights", "context": "context"}  # queries, keys, values: "proj"


@dataclass
class Head:
    """What one score product led to: a head of its own, or every head of a batched product."""

    found: dict[str, torch.Tensor] = field(default_factory=dict)
    sources: dict[str, str | None] = field(default_factory=dict)
    prescale: dict[str, float] = field(default_factory=dict)
    reconstructed: set[str] = field(default_factory=set)
    unseen: set[str] = field(default_factory=set)  # stages made inside a kernel where nothing can see them
    softmax_dim: int | None = None  # in the rank of the module's own tensor
    softmax_axis: int | None = None  # in the canonical (batch, heads, query, key) view
    operands: tuple[list[torch.Tensor], list[str], str] | None = None  # the score product's operands and einsum letters
    roles: tuple[str | None, str | None] = (None, None)
    output: torch.Tensor | None = None  # the context tensor as the module made it
    item: int | None = None  # the one batch item its queries and keys come from (a loop over the batch)
    sinks: tuple[torch.Tensor, bool] | None = None  # a learned logit column joined to the softmax input, and
    # whether it comes after the keys
    value_products: int = 0  # products of its weights with distinct values tensors (more: split values)
    logit_factor: float = math.nan  # the scalar its softmax input is of its scores, read from the ops (nan: unknown)
    terms: bool = False  # a term the module computes itself (relative-position logits, a bias) added before the softmax
    selects: tuple[int, int] | None = None  # a top-k of its scores was taken: (k, candidates) (attnlab.capture.selection)
    selected: torch.Tensor | None = None  # which candidates each row kept, (..., query, candidates)
    mixed: set[str] = field(default_factory=set)  # its queries, keys or values convolved over the tokens (`token_mixing`)


class Recording:
    """What one capture has seen: every tensor's tag, the heads found and the stages tapped."""

    def __init__(self, module: nn.Module, x: torch.Tensor) -> None:
        named, roles = list(module.named_parameters()), module_roles(module)
        # a fused projection has no single role (Phi-3's qkv_proj reads as v_proj): its columns say
        self.params = {id(p): Tag("param", projection_role(name) if roles.get(name) in QKV_ROLES else None)
                       for name, p in named}
        self.fused: dict[int, FusedLayout] = {id(p): fused_layout(module, name) for name, p in named
                                              if roles.get(name) == "qkv"}
        self.out = {id(p) for name, p in named if roles.get(name) == "out"}
        # parameters the class's roles name nothing (a norm's gain, ConvBERT's conv kernel), not a wrapped projection's
        # weight whose name alone says nothing (Gemma 4's q_proj.linear.weight)
        self.roleless = {id(p) for name, p in named if roles.get(name) is None}
        # whether its parameters name queries and keys: then a product of two projections neither of which is one
        # (ConvBERT's dynamic convolution kernel) is a part of the class's own, not its scores
        self.named_qk = {"queries", "keys"} <= {roles.get(name) for name, _ in named} or bool(self.fused)
        self.out_inputs: list[torch.Tensor] = []  # what each output-projection product was given
        self.tags: dict[int, tuple[weakref.ref[torch.Tensor], Tag]] = {}
        self.heads: list[Head] = []
        self.explicit: dict[str, torch.Tensor] = {}
        self.gate: str | None = None  # the projection whose columns gate the context before the output projection
        self.normed: list[weakref.ref[torch.Tensor]] = []  # what a norm (layer_norm, rms_norm) returned
        self.context_normed = False  # a norm was given the context (a norm inside the class before its out_proj)
        self.context_terms = False  # a term the module computes itself was added to the context before out_proj
        self.input_normed = False  # a norm was given the inputs (a norm inside the class before its projections)
        self.context_joined = False  # the context joined with another branch's output (ConvBERT's convolution)
        self.memory = Memory()  # buffers written with tagged tensors (a KV cache), read back with their tags
        self.batch = x.shape[0] if x.dim() == 3 else 1
        items = torch.arange(self.batch).view(-1, *(1,) * (x.dim() - 1)).expand(x.shape) if x.dim() == 3 else None
        self.set_tag(x, Tag("input", items=items))
        for bias in hf_record.given_biases(module, x):  # a term its model hands it for the scores, not a mask
            self.set_tag(bias, Tag("given"))

    def set_tag(self, tensor: torch.Tensor, tag: Tag) -> None:
        self.tags[id(tensor)] = (weakref.ref(tensor), tag)

    def tag_all(self, out: Any, tag: Tag) -> None:
        for tensor in tensors_in([out]):
            self.set_tag(tensor, tag)

    def tag(self, tensor: Any) -> Tag | None:
        """The tensor's own tag, else what it reads from a written buffer."""
        own = self.own_tag(tensor)
        if own is not None or not self.memory.shadows or not isinstance(tensor, torch.Tensor):
            return own
        return self.memory.tag(tensor)

    def own_tag(self, tensor: Any) -> Tag | None:
        if not isinstance(tensor, torch.Tensor):
            return None
        entry = self.tags.get(id(tensor))
        if entry is not None and entry[0]() is tensor:
            return entry[1]
        return self.params.get(id(tensor))

    def head_of(self, tag: Tag) -> Head:
        return self.heads[tag.head] if tag.head is not None and tag.head < len(self.heads) else Head()

    def role(self, tag: Tag) -> str | None:
        """The projection role of an activation: its parameter's, or its fused column block's."""
        if tag.kind != "proj":
            return None
        if tag.role is not None or tag.columns is None or tag.column_roles is None or tag.columns.numel() == 0:
            return tag.role
        # the roles of the columns this tensor holds, read once per distinct element: the columns are
        # broadcast over tokens (stride 0), so reading every element would read the same ones T times
        columns = tag.columns[tuple(0 if stride == 0 else slice(None) for stride in tag.columns.stride())]
        found = tag.column_roles[columns].flatten()
        return QKV_ROLES[int(found[0])] if bool((found == found[0]).all()) else None  # one role: no sort needed

    def tapped(self, stage: str, tensor: torch.Tensor) -> None:
        """Record the stage, and tag the tensor as that stage so the data flow after it is read too."""
        self.explicit[stage] = tensor
        kind = _TAP_KINDS.get(stage, "proj")
        old = self.tag(tensor)
        if kind not in ("proj", "input") and not self.heads:
            self.heads.append(Head())  # head 0, which the tag names: what follows the tapped stage is read into it
        self.set_tag(tensor, Tag(kind, old.role if old is not None and kind == "proj" else None, head=0))

    def release(self) -> None:
        """Drop every tensor the recording held; the Capture keeps what it needs."""
        self.heads, self.explicit, self.tags, self.out_inputs, self.memory = [], {}, {}, [], Memory()
        self.normed = []


def propagate(rec: Recording, func: Callable[..., Any] | None, name: str, args: tuple[Any, ...], kwargs: dict[str, Any], out: Any) -> None:
    """The output of an op carries its most telling input's tag: a view of a projection is that
    projection, anything computed from the scores is derived from them."""
    outputs = tensors_in([out])
    if not outputs or name in FRESH:
        return
    read = args[:1] if name in FIRST_ONLY else [*args, *kwargs.values()]
    tagged = [(t, tag) for t in tensors_in(read) if (tag := rec.tag(t)) is not None]
    if not tagged:
        return
    if name in _ADD and _context_terms(rec, tagged, out):
        return
    if name in NORMS and _normed_input(rec, args, out):
        return
    source, tag = min(tagged, key=lambda pair: _PRIORITY.index(pair[1].kind))
    if name in JOIN and _sinks(rec, args, kwargs, tagged, tag, out):
        return
    if name in JOIN and _joined_context(rec, tagged, out):
        return
    # (by the parameters' own roles: a fused projection's columns are followed through the join as they are)
    if name in JOIN and tag.kind == "proj" and len({t.role for _, t in tagged if t.kind == "proj" and t.role}) > 1:
        tag = Tag("proj", mixed=tag.mixed)  # query and key projections side by side (ZAYA's): no one projection's
    if name in MUL and _gate(rec, tagged, out):
        return
    if tag.kind in LOGITS and name not in SHAPE_OPS:
        rec.tag_all(out, _logit_tag(name, args, kwargs, source, tag, [t for x, t in tagged if x is not source]))
        return
    shape_op = name in KEEP_FACTOR
    bases = replayed(func, args, kwargs, source, tag.base, outputs) if shape_op and tag.base is not None else None
    columns, items = ((replayed(func, args, kwargs, source, along, outputs)
                       if name in SHAPE_OPS and along is not None else None) for along in (tag.columns, tag.items))
    for i, tensor in enumerate(outputs):
        new = tag
        if tag.factor != 1.0 and _learned_bias(rec, name, tagged):  # c * q + b: c * (q + b / c), still c
            new = Tag(tag.kind, tag.role, tag.factor, head=tag.head, mixed=tag.mixed)
        elif tag.factor != 1.0 and not shape_op:  # the factor survives only ops that commute with it
            new = Tag(tag.kind, tag.role, head=tag.head, mixed=tag.mixed)
        elif tag.factor != 1.0:
            new = new._replace(base=bases[i] if bases else None)
        if tag.columns is not None:
            new = new._replace(columns=columns[i] if columns else None)
        if tag.items is not None:
            new = new._replace(items=items[i] if items else None)
        rec.set_tag(tensor, new)


_CONVOLUTIONS = ("conv1d", "conv2d", "conv3d")


def token_mixing(rec: Recording, name: str, args: tuple[Any, ...], kwargs: dict[str, Any], out: Any) -> None:
    """A projection convolved over its tokens by a kernel wider than one (Inkling 2's short causal
    convolution of its keys and values): still that projection, but each row a mix of its neighbours',
    so no row is x @ W of its own token; the tag says so, and its stage is named, not compared."""
    if name not in _CONVOLUTIONS or not args or not isinstance(out, torch.Tensor):
        return
    given, weight = rec.tag(args[0]), kwargs.get("weight", args[1] if len(args) > 1 else None)
    if given is None or given.kind != "proj" or not isinstance(weight, torch.Tensor) or math.prod(weight.shape[2:]) < 2:
        return
    tag = rec.tag(out)
    if tag is not None and tag.kind == "proj":
        rec.set_tag(out, tag._replace(mixed=True))


def _learned_bias(rec: Recording, name: str, tagged: list[tuple[torch.Tensor, Tag]]) -> bool:
    """A pre-scaled projection plus a parameter of no role (Funnel's `q_head * scale + r_w_bias * scale`, a
    learned content bias): the factor still scales the sum, the bias read as part of the projection."""
    kinds = sorted(tag.kind for _, tag in tagged)
    return name in _ADD and kinds == ["param", "proj"] and all(t.role is None for _, t in tagged if t.kind == "param")


def _joined_context(rec: Recording, tagged: list[tuple[torch.Tensor, Tag]], out: Any) -> bool:
    """torch.cat([context, a branch of its own]) (ConvBERT's dynamic convolution beside its heads): still the
    context on its way out, widened; the join is noted."""
    if not _still_context(rec, tagged, out):
        return False
    rec.context_joined = True
    return True


def _normed_input(rec: Recording, args: tuple[Any, ...], out: Any) -> bool:
    """norm(x) inside the class (Vocos' GroupNorm before its q, k and v): still the inputs, whose projections
    are the queries, keys and values; the norm is noted. Its gain and shift are parameters of no role, which
    would otherwise tag it as one."""
    given = rec.tag(args[0]) if args else None
    if given is None or given.kind != "input" or not isinstance(out, torch.Tensor) or out.shape != args[0].shape:
        return False
    rec.input_normed = True
    rec.set_tag(out, given)
    return True


def _context_terms(rec: Recording, tagged: list[tuple[torch.Tensor, Tag]], out: Any) -> bool:
    """context + a term the module computes from its inputs or weights (ViTS's relative-position
    values): still the context on its way to the output projection; the term is noted."""
    if not _still_context(rec, tagged, out):
        return False
    rec.context_terms = True
    return True


def _still_context(rec: Recording, tagged: list[tuple[torch.Tensor, Tag]], out: Any) -> bool:
    """The context beside terms the module computes itself: `out` keeps the context's tag."""
    kinds = {tag.kind for _, tag in tagged}
    if "context" not in kinds or len(kinds) < 2 or not kinds - {"context"} <= set(TERMS):
        return False
    rec.tag_all(out, next(tag for _, tag in tagged if tag.kind == "context"))
    return True


def _logit_tag(name: str, args: tuple[Any, ...], kwargs: dict[str, Any], source: torch.Tensor, tag: Tag,
               others: list[Tag]) -> Tag:
    """What an op on the scores makes: still their scalar factor, and whether a term the module
    computes from its inputs or weights was added (ViTS's relative-position logits, Doge's dynamic
    mask), so that the scale is read from the ops and not fitted over an added term. A mask
    (untagged) or a masked fill keeps both; any other op leaves the factor unknown."""
    factor, terms = tag.factor, tag.terms
    if name in _ADD and "alpha" not in kwargs and (name in _ADD_EITHER_SIDE or (args and args[0] is source)):
        factor = math.nan if any(t.kind in LOGITS for t in others) else factor
        terms = terms or any(t.kind in TERMS for t in others)
    elif name not in _MASK_FILL:
        factor = math.nan
    return Tag("derived", factor=factor, head=tag.head, terms=terms)


def _sinks(rec: Recording, args: tuple[Any, ...], kwargs: dict[str, Any], tagged: list[tuple[torch.Tensor, Tag]], tag: Tag,
           out: torch.Tensor) -> bool:
    """torch.cat([logits, sinks], dim=-1): a learned per-head logit column joins the softmax input
    (gpt-oss's sinks); the head keeps it apart, so its scaled scores and weights stay (query, key)."""
    pieces = args[0] if args else kwargs.get("tensors")
    dim = kwargs.get("dim", args[1] if len(args) > 1 else 0)
    if tag.kind not in LOGITS or tag.head is None or not isinstance(pieces, (tuple, list)) or len(pieces) != 2:
        return False
    kinds = [t.kind if (t := rec.tag(p)) is not None else None for p in pieces]
    if sorted(kinds, key=str) not in (sorted([tag.kind, "param"], key=str),) or dim % out.dim() != out.dim() - 1:
        return False
    after = kinds[1] == "param"
    rec.heads[tag.head].sinks = (pieces[1] if after else pieces[0], after)
    rec.set_tag(out, Tag("derived", head=tag.head))
    return True


def _gate(rec: Recording, tagged: list[tuple[torch.Tensor, Tag]], out: torch.Tensor) -> bool:
    """context * sigmoid(gate), the gate a projection's own columns (Qwen3-Next's q_proj): still the
    context, on its way to the output projection; the projection is noted."""
    kinds = {tag.kind: tag for _, tag in tagged}
    if set(kinds) != {"context", "proj"}:
        return False
    rec.gate = rec.role(kinds["proj"]) or "a projection"
    rec.tag_all(out, kinds["context"])
    return True


def keep_scores_before_inplace(rec: Recording, target: Any) -> None:
    """An in-place op is about to overwrite a recorded scores tensor: keep its values first."""
    tag = rec.tag(target)
    if tag is None or tag.kind not in ("scores", "context") or tag.head is None or not isinstance(target, torch.Tensor):
        return
    head = rec.heads[tag.head]
    if tag.kind == "context":  # ViTS's `context += relative values`: the stage stays the weights' product
        if head.found.get("context") is target:
            head.found["context"] = target.clone()
        return
    if head.found.get("scores") is target:
        head.found["scores"] = target.clone()  # the one copy: the module overwrites its own scores
    rec.set_tag(target, Tag("derived", head=tag.head))


def scaling(rec: Recording, name: str, args: tuple[Any, ...], kwargs: dict[str, Any], out: Any) -> bool:
    """A projection (or projection parameter) times a scalar: keep its provenance, record the factor."""
    if not isinstance(out, torch.Tensor) or len(args) not in (1, 2) or kwargs.get("rounding_mode") is not None:
        return False
    for tensor, factor in _factors(rec, name, args):
        tag = rec.tag(tensor)
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
            rec.set_tag(out, tag._replace(factor=tag.factor * factor, base=base, softmax=None))
            return True
        step = tag.softmax
        if tag.kind in LOGITS and step is None:  # the scores scaled: the factor is kept for the softmax input
            rec.set_tag(out, Tag("derived", factor=tag.factor * factor, head=tag.head, terms=tag.terms))
            return True
        if tag.kind == "derived" and step and step.step == "shifted" and out is not tensor:
            # (s - s.max(dim)) / sqrt(d_k): the softmax input is s / sqrt(d_k), shifted per row
            rec.set_tag(out, Tag("derived", softmax=step._replace(factor=step.factor * factor), head=tag.head))
            return True
    return False


def _factors(rec: Recording, name: str, args: tuple[Any, ...]) -> list[tuple[Any, float | None]]:
    """(operand, the scalar it is multiplied by) for each operand a product or quotient may scale."""
    if name in MUL and len(args) == 2:
        return [(args[0], _scalar(rec, args[1])), (args[1], _scalar(rec, args[0]))]
    if name in DIV and len(args) == 2:
        divisor = _scalar(rec, args[1])
        return [(args[0], 1.0 / divisor if divisor else None)]
    if name in NEG:
        return [(args[0], -1.0)]
    return []


def _scalar(rec: Recording, value: Any) -> float | None:
    """A Python number, or an untagged one-element tensor, as a float; else None."""
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, torch.Tensor) and value.numel() == 1 and rec.tag(value) is None:
        return float(value)
    return None
