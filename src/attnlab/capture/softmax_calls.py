"""The softmax, called or written out: its input is the scaled scores, its output the weights.

A hand-written softmax is followed step by step as a small state machine on the tags:
`exp(s - s.max(dim, keepdim=True).values) / exp(...).sum(dim, keepdim=True)`, `s.exp() /
s.exp().sum(dim, keepdim=True)`, `log_softmax(s, dim).exp()`, with a scalar factor allowed after
the shift."""

from __future__ import annotations

from typing import Any

import torch

from attnlab.capture.provenance import LOGITS, Recording, propagate
from attnlab.capture.stages import canonical_axis
from attnlab.capture.tags import SoftmaxStep, Tag
from attnlab.capture.torch_calls import DIV, MAX, SUB, one_dim


def softmax(rec: Recording, name: str, args: tuple[Any, ...], kwargs: dict[str, Any], out: torch.Tensor) -> None:
    """torch.softmax / log_softmax in any spelling."""
    source = args[0] if args else kwargs.get("input")
    tag = rec.tag(source)  # a tag only on a tensor
    if tag is None or tag.kind not in LOGITS or "weights" in rec.head_of(tag).found \
            or not isinstance(source, torch.Tensor):
        propagate(rec, None, name, args, kwargs, out)
        return
    dim = kwargs.get("dim", args[1] if len(args) > 1 else None)
    if dim is None:  # F.softmax's legacy implicit dim
        dim = 0 if source.dim() in (0, 1, 3) else 1
    logits = source
    step = tag.softmax
    if step is None and tag.head is not None:  # the softmax input as the ops made it from the scores
        rec.heads[tag.head].logit_factor, rec.heads[tag.head].terms = tag.factor, tag.terms
    if step and step.step == "shifted":  # softmax(c * (s - max)) == softmax(c * s)
        logits = step.logits if step.factor == 1.0 else step.logits * step.factor
    if name == "log_softmax":  # a softmax only once exp() is taken
        rec.set_tag(out, Tag("derived", softmax=SoftmaxStep("logsoftmax", logits, dim=dim % source.dim()),
                             head=tag.head))
        return
    _record(rec, tag.head, logits, dim, out)


def manual_softmax(rec: Recording, name: str, args: tuple[Any, ...], kwargs: dict[str, Any], out: Any) -> bool:
    """exp of scores-derived logits (max-shifted or not), divided by its own sum along one dim."""
    if not args or not isinstance(args[0], torch.Tensor):
        return False
    tag = rec.tag(args[0])
    if tag is None or tag.kind not in LOGITS or "weights" in rec.head_of(tag).found:
        return False
    step = tag.softmax or SoftmaxStep("", args[0])
    head = tag.head

    def derived(s: SoftmaxStep) -> Tag:
        return Tag("derived", softmax=s, head=head)

    if name in MAX:
        rec.tag_all(out, derived(SoftmaxStep("max", args[0])))
        return True
    if name in SUB and len(args) == 2 and "alpha" not in kwargs and isinstance(args[1], torch.Tensor):
        other = rec.tag(args[1])
        if other is not None and other.softmax and other.softmax.step == "max" and other.softmax.logits is args[0]:
            rec.set_tag(out, derived(SoftmaxStep("shifted", args[0])))
            return True
        return False
    if name == "exp":
        if step.step == "logsoftmax" and step.dim is not None:  # log_softmax's dim, always set
            _record(rec, tag.head, step.logits, step.dim, out)
            return True
        logits, factor = (step.logits, step.factor) if step.step == "shifted" else (args[0], 1.0)
        rec.set_tag(out, derived(SoftmaxStep("exp", logits, factor)))
        return True
    if name == "sum" and step.step == "exp":
        dim = one_dim(args[1] if len(args) > 1 else kwargs.get("dim", kwargs.get("axis")), args[0].dim())
        if dim is None:
            return False
        rec.set_tag(out, derived(step._replace(step="expsum", dim=dim)))
        return True
    if name in DIV and len(args) == 2 and step.step == "exp" and isinstance(args[1], torch.Tensor):
        return _normalised(rec, tag, step, args[1], out)
    return False


def _normalised(rec: Recording, tag: Tag, step: SoftmaxStep, total: torch.Tensor, out: torch.Tensor) -> bool:
    """exp(...) / total: the softmax when `total` is the sum of the same exp along one dim."""
    total_tag = rec.tag(total)
    total_step = total_tag.softmax if total_tag is not None else None
    if total_step is None or total_step.step != "expsum" or total_step.dim is None:  # an expsum has its dim
        return False
    if not (total_step.factor == step.factor and _same(total_step.logits, step.logits)
            and _broadcasts_along(total, out, total_step.dim)):
        return False
    logits = total_step.logits
    if total_step.factor != 1.0:  # scaled after the shift: the module never made the softmax input
        logits = logits * total_step.factor
    _record(rec, tag.head, logits, total_step.dim, out)
    return True


def _record(rec: Recording, head: int | None, logits: torch.Tensor, dim: int, weights: torch.Tensor) -> None:
    if head is None:
        return
    found = rec.heads[head]
    found.softmax_dim = dim % logits.dim()
    found.softmax_axis = canonical_axis(found.softmax_dim, logits, rec.batch)
    if found.sinks is not None and found.softmax_dim == logits.dim() - 1:  # the sink column kept apart
        sink, after = found.sinks
        keys = logits.shape[-1] - sink.shape[-1]
        part = slice(0, keys) if after else slice(sink.shape[-1], None)
        rec.set_tag(weights, Tag("weights", head=head))  # the module's own, sink column and all
        logits, weights = logits[..., part], weights[..., part]
    found.found["scaled_scores"] = logits
    found.found["weights"] = weights
    rec.set_tag(weights, Tag("weights", head=head))


def _same(a: torch.Tensor, b: torch.Tensor) -> bool:
    """The same logits: one tensor, or (written out twice) equal values."""
    return a is b or (a.shape == b.shape and a.dtype == b.dtype and bool(torch.equal(a, b)))


def _broadcasts_along(total: torch.Tensor, out: torch.Tensor, dim: int) -> bool:
    """Whether dividing by `total` divides each slice along `dim` by its own sum (keepdim or unsqueezed)."""
    shape = (1,) * (out.dim() - total.dim()) + tuple(total.shape)
    return len(shape) == out.dim() and shape[dim] == 1 and all(
        shape[i] == out.shape[i] for i in range(out.dim()) if i != dim)
