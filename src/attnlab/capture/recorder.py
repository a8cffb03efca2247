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
call with its arguments (here) and hands it to the part that reads it: `provenance` (tags in a side
table, weak references, no copies; views, splits and scalar factors), `products` (projections,
scores, context), `softmax_calls` (called or written out), `fused_kernels` (SDPA, FlexAttention,
nn.MultiheadAttention), `buffers` (writes into a buffer such as a KV cache); `result` puts the heads' stages together. The module is called through
`attnlab.modules.built`, which says what of its return is the output.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Collection
from contextvars import ContextVar
from typing import Any

import torch
from torch import nn
from torch._ops import HigherOrderOperator
from torch.overrides import TorchFunctionMode

from attnlab.capture import fused_kernels, products, provenance, selection, softmax_calls
from attnlab.capture.fused_kernels import flex_attention_eager
from attnlab.capture.result import Capture, assemble, max_abs_or_nan
from attnlab.capture.stages import STAGES
from attnlab.capture.torch_calls import CONVS, NORMS, PRODUCTS, as_einsum, is_inplace, op_name
from attnlab.modules import hf, hf_lineage
from attnlab.modules.built import BuiltModule, Returned, as_built

__all__ = ["Capture", "capture", "max_abs_or_nan", "tap"]

_ACTIVE: ContextVar[provenance.Recording | None] = ContextVar("attnlab_capture", default=None)


def tap(stage: str, tensor: torch.Tensor) -> torch.Tensor:
    """Mark `tensor` as `stage` from inside a plugin; returns it unchanged.

    For variants whose stages the data flow cannot reveal. A no-op outside `capture`, so a
    tapped class still runs anywhere; an explicit tap wins over what capture infers.
    """
    if stage not in STAGES:
        raise ValueError(f"tap: unknown stage '{stage}'; allowed: {', '.join(STAGES)}")
    recording = _ACTIVE.get()
    if recording is not None:
        recording.tapped(stage, tensor)
    return tensor


def capture(module: nn.Module | BuiltModule, x: torch.Tensor) -> Capture:
    """Call the module on `x` once under no_grad (`module(x)` for a plain module) and return every
    stage found in its data flow."""
    built = as_built(module)
    recording = provenance.Recording(built.module, x)
    token = _ACTIVE.set(recording)
    try:
        with torch.no_grad(), flex_attention_eager(), _Recorder(recording):
            returned = built.call(x)
    finally:
        _ACTIVE.reset(token)
    return finished(recording, built.module, x, returned)


def finished(recording: provenance.Recording, module: nn.Module, x: torch.Tensor, returned: Returned) -> Capture:
    """The Capture of `module`'s recorded forward on `x`, the recording let go."""
    try:
        captured = assemble(recording, x, returned)
        captured.declared_scale = hf.declared_scale(module)  # any module's config or constructor may declare one
        if hf.is_hf_module(module):
            captured.declared_clip = hf.declared_clip(module)
            origin = hf_lineage.transformers_class(type(module))
            captured.no_softmax = origin.__name__ if origin and hf_lineage.computes_no_softmax(origin) else None
            normed = [r() for r in recording.normed]
            if "output" in captured.stages and any(t is returned.output for t in normed):
                captured.unobservable["output"] = _POST_NORM
            elif "output" in captured.stages and recording.context_normed:
                captured.unobservable["output"] = _NORMED_CONTEXT
            elif "output" in captured.stages and recording.context_terms:
                captured.unobservable["output"] = _CONTEXT_TERMS
            elif "output" in captured.stages and recording.context_joined:
                captured.unobservable["output"] = _JOINED_CONTEXT
            if recording.input_normed:  # every stage is made from norm(x), which the reference never sees
                captured.unobservable |= {stage: _NORMED_INPUT for stage in STAGES
                                          if stage in captured.stages and stage != "inputs"}
        return captured
    finally:  # the recording may sit in a reference cycle: what it held must not wait for the collector
        recording.release()


# a library's attention class that returns a norm's output: BERT-style blocks (ALBERT's AlbertAttention)
_POST_NORM = ("the class normalises its own output (its residual and LayerNorm after the output projection, a "
              "BERT-style attention block), so it is not the attention's output")


# ...that normalises its merged context before the output projection (Kosmos-2's inner_attn_ln)
_NORMED_CONTEXT = ("the class normalises its merged context before its output projection (a norm inside the "
                   "attention, Kosmos-2's inner_attn_ln), so its output is not out_proj(context)")


# ...that joins its context with a branch of its own (ConvBERT's span-based dynamic convolution)
_JOINED_CONTEXT = ("the class joins its context with the output of a branch of its own (ConvBERT's span-based "
                   "dynamic convolution, torch.cat beside the heads), so its output is not the attention's alone")


# ...that normalises its inputs before its projections (Vocos' GroupNorm)
_NORMED_INPUT = ("the class normalises its inputs before its query, key and value projections (a norm inside the "
                 "attention, Vocos' GroupNorm), so its queries are not x @ W_query")


# ...that adds a term of its own to the context before its output projection (ViTS's relative-position values)
_CONTEXT_TERMS = ("the class adds a term it computes itself to its context before its output projection (relative-"
                  "position values, ViTS's emb_rel_v), so its output is not out_proj(context)")


class _Recorder(TorchFunctionMode):
    """Sees every torch call of the forward with its arguments and hands it to the part that reads it."""

    def __init__(self, recording: provenance.Recording | None) -> None:
        super().__init__()
        self.rec = recording  # None between the modules a whole-model capture watches: calls pass through

    def __torch_function__(self, func: Callable[..., Any], types: Collection[type], args: tuple[Any, ...] = (),
                           kwargs: dict[str, Any] | None = None) -> Any:
        kwargs = kwargs or {}
        rec, name = self.rec, op_name(func)
        if rec is None:
            return func(*args, **kwargs)
        if name == "multi_head_attention_forward":
            return fused_kernels.multi_head_attention(rec, func, args, kwargs)
        if is_inplace(name) and args:
            provenance.keep_scores_before_inplace(rec, args[0])
        out = func(*args, **kwargs)
        if name in NORMS and isinstance(out, torch.Tensor):
            rec.normed.append(weakref.ref(out))
            given = rec.tag(args[0]) if args and isinstance(args[0], torch.Tensor) else None
            rec.context_normed |= given is not None and given.kind == "context"
        if args and rec.own_tag(args[0]) is None and rec.memory.write(func, name, args, kwargs, rec.tag):
            return out  # a tagged tensor written into a buffer: read back, it keeps its tag
        if name == "__iter__":  # `queries, keys, values = qkv`: the items are tagged as unbind's would be
            out = list(out)
            provenance.propagate(rec, lambda t: list(t.unbind(0)), "unbind", args, kwargs, out)
            return iter(out)
        if name in PRODUCTS and (name not in CONVS or as_einsum(name, args, kwargs) is not None):
            products.product(rec, func, name, args, kwargs, out)
        elif name in ("softmax", "log_softmax"):
            softmax_calls.softmax(rec, name, args, kwargs, out)
        elif name == "scaled_dot_product_attention":
            fused_kernels.sdpa(rec, args, kwargs, out)
        elif name == "flex_attention" and isinstance(func, HigherOrderOperator):
            fused_kernels.flex_attention(rec, args, out)
        elif name in selection.SELECTIONS:  # indices of keys, not values computed from the scores: no tag
            selection.select(rec, args, kwargs, out)
        elif not (provenance.scaling(rec, name, args, kwargs, out)
                  or softmax_calls.manual_softmax(rec, name, args, kwargs, out)):
            provenance.propagate(rec, func, name, args, kwargs, out)
            provenance.token_mixing(rec, name, args, kwargs, out)
        return out
