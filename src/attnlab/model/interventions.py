"""Edits to one attention layer of a model, declared as data (`intervene=KIND intervene.head=H`).

Kinds, each applied to the layer `layer=` names while the model runs:
- `observe`: no edit; every chosen layer's stages and its heads' patterns from one forward;
- `ablate_head`: head `intervene.head`'s context vectors (the output projection's input) set to
  zero (`intervene.mode=zero`) or to their mean over the positions (`mode=mean`);
- `scale_scores`: the scores entering the softmax multiplied by `intervene.factor` (one head, or
  every head without `intervene.head`), the model's mask put back after, whatever its fill;
- `patch`: the head's (or every head's) context vectors replaced by those the same layer made on
  `intervene.text`, another text of as many tokens (activation patching);
- `function`: `intervene.function=MODULE:NAME` (or a callable from Python) given the layer's
  context vectors (1, T, H, hs) and returning their replacement.
`intervene.metric=MODULE:NAME` adds a measure of one's own to the edit's effect (attnlab.model.user_metric).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn
from torch.overrides import TorchFunctionMode

from attnlab.capture.recorder import tap
from attnlab.diagnosis.masking import fill_masked
from attnlab.errors import UserError
from attnlab.model.inputs import real_positions
from attnlab.model.user_callables import resolve
from attnlab.model.user_metric import user_metric
from attnlab.modules.built import PluginError
from attnlab.modules.roles import module_roles

KINDS = ("observe", "ablate_head", "scale_scores", "patch", "function")
MODES = ("zero", "mean")
KEYS = {"name", "head", "mode", "factor", "text", "function", "metric"}
ContextEdit = Callable[[Tensor], Tensor]  # (1, T, H, hs) -> (1, T, H, hs)
TAKES = "taking and returning the context vectors (1, T, heads, head size)"


@dataclass(frozen=True)
class Intervention:
    kind: str
    head: int | None = None  # None: every head
    mode: str = "zero"
    factor: float = 1.0
    text: str | None = None
    function: str | None = None
    metric: str | None = None  # MODULE:NAME of a measure of one's own (attnlab.model.user_metric)

    @property
    def label(self) -> str:
        """How the record names it: ablate_head(head=0, mode=mean)."""
        shown = {"head": self.head, "mode": self.mode if self.kind == "ablate_head" else None,
                 "factor": self.factor if self.kind == "scale_scores" else None,
                 "text": self.text, "function": self.function}
        inside = ", ".join(f"{key}={value!r}" if key == "text" else f"{key}={value}"
                           for key, value in shown.items() if value is not None)
        return f"{self.kind}({inside})" if inside else self.kind


def intervention(block: Mapping[str, Any]) -> Intervention | None:
    """The `intervene` block, checked (one line per mistake); None when nothing is asked."""
    if not block or not block.get("name"):
        if block:
            raise UserError(f"intervene.{next(iter(block))}: needs intervene=KIND ({', '.join(KINDS)})")
        return None
    kind = str(block["name"])
    if kind not in KINDS:
        raise UserError(f"intervene={kind}: unknown; allowed are {', '.join(KINDS)}")
    stray = sorted(set(block) - KEYS)
    if stray:
        raise UserError(f"intervene.{stray[0]}: unknown key; allowed are intervene.{', intervene.'.join(sorted(KEYS - {'name'}))}")
    head = block.get("head")
    if head is not None and (isinstance(head, bool) or not isinstance(head, int) or head < 0):
        raise UserError(f"intervene.head={head}: must be a head index (0, 1, ...)")
    mode = str(block.get("mode") or "zero")
    if mode not in MODES:
        raise UserError(f"intervene.mode={mode}: allowed are {', '.join(MODES)}")
    factor = block.get("factor", 1.0)
    if isinstance(factor, bool) or not isinstance(factor, (int, float)):
        raise UserError(f"intervene.factor={factor}: must be a number")
    needs = {"ablate_head": "head", "patch": "text", "function": "function", "scale_scores": "factor"}.get(kind)
    if needs and block.get(needs) is None:
        raise UserError(f"intervene={kind}: needs intervene.{needs}=...")
    function, metric = (None if block.get(key) is None else str(block[key]) for key in ("function", "metric"))
    if function is not None:
        resolve("intervene.function", function, TAKES)
    if metric is not None:
        if kind == "observe":
            raise UserError(f"intervene.metric={metric}: intervene=observe changes nothing, so there is no effect to measure")
        user_metric(metric)  # imported and named now, before the model loads
    return Intervention(kind, head, mode, float(factor), block.get("text"), function, metric)


def output_projection(attention: nn.Module) -> nn.Module:
    """The submodule holding the layer's output projection: its input is every head's context vectors."""
    name = next((name for name, role in module_roles(attention).items() if role == "out"), None)
    if name is None:
        raise UserError(f"{type(attention).__name__}: no output projection found; head edits need the heads' "
                        f"context vectors (intervene=scale_scores needs none)")
    return attention.get_submodule(name.rpartition(".")[0])


@contextmanager
def head_contexts(attention: nn.Module, heads: int, edit: ContextEdit) -> Iterator[None]:
    """Every call of the layer with its heads' context vectors (1, T, H, hs) replaced by `edit`'s."""
    def pre(_module, args):
        context = args[0]  # (1, T, H * hs)
        split = context.unflatten(-1, (heads, context.shape[-1] // heads))  # (1, T, H, hs)
        context_vec = edit(split)  # (1, T, H, hs)
        # the layer's context stage is the edited one, the output projection's input: a capture of the
        # edited layer compares what the edit made, not the product the edit replaced
        tap("context", context_vec.transpose(1, 2))  # (1, H, T, hs)
        return (context_vec.flatten(-2), *args[1:])
    hook = output_projection(attention).register_forward_pre_hook(pre)
    try:
        yield
    finally:
        hook.remove()


class _ScaledScores(TorchFunctionMode):
    """The softmax's input (the scores, after the layer's own scaling and mask) times `factor`, on one
    head or all; the model's mask put back after (a fill times the factor would be no mask: times 0 a
    score of 0, times -1 the largest)."""

    def __init__(self, factor: float, head: int | None) -> None:
        super().__init__()
        self.factor, self.head = factor, head
        self.scaled = False

    def __exit__(self, *exc_info: Any) -> None:
        super().__exit__(*exc_info)
        if exc_info[0] is None and not self.scaled:  # a fused kernel: the scores were never there to scale
            raise PluginError("intervene=scale_scores: the layer called no softmax on (batch, heads, T, T) scores "
                              "(a fused kernel computes them unseen); run it with model.attn_implementation=eager")

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if getattr(func, "__name__", "") == "softmax" and args and args[0].dim() == 4:
            self.scaled = True
            attn_scores = args[0]  # (B, nh, T, T)
            dim = args[1] if len(args) > 1 and isinstance(args[1], int) else kwargs.get("dim", -1)
            scale = torch.ones(attn_scores.shape[1], dtype=attn_scores.dtype)  # (nh,)
            scale[slice(None) if self.head is None else self.head] = self.factor
            edited = torch.where(fill_masked(attn_scores, dim), attn_scores,
                                 attn_scores * scale[:, None, None])  # (B, nh, T, T)
            args = (edited, *args[1:])
        return func(*args, **kwargs)


class Intervened(nn.Module):
    """The layer's own attention, called with the edit in force, in the layer's place."""

    def __init__(self, attention: nn.Module, edit: Callable[[], Any]) -> None:
        super().__init__()
        self.attention = attention
        self.edit = edit

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        with self.edit():
            return self.attention(*args, **kwargs)


def edited(attention: nn.Module, chosen: Intervention, heads: int,
           patched: Tensor | None = None, lengths: tuple[int, ...] | None = None) -> Intervened:
    """The layer with `chosen` applied. `patched`: (1, T, H, hs) the other run's context vectors;
    `lengths`: a padded batch's texts' tokens (a mean is over a text's own positions, never its pads)."""
    def context_edit(values: Tensor) -> Tensor:  # (1, T, H, hs)
        at = slice(None) if chosen.head is None else chosen.head
        if chosen.kind == "function":
            return resolve("intervene.function", chosen.function, TAKES)(values)
        context_vec = values.clone()
        if chosen.kind == "patch":
            context_vec[:, :, at] = patched[:, :, at]
        elif chosen.mode == "mean":
            context_vec[:, :, at] = _position_mean(values[:, :, at], lengths)
        else:
            context_vec[:, :, at] = 0.0
        return context_vec

    def edit() -> Any:
        stack = ExitStack()
        if chosen.kind == "scale_scores":
            stack.enter_context(_ScaledScores(chosen.factor, chosen.head))
        elif chosen.kind != "observe":
            stack.enter_context(head_contexts(attention, heads, context_edit))
        return stack

    return Intervened(attention, edit)


def _position_mean(values: Tensor, lengths: tuple[int, ...] | None) -> Tensor:
    """(B, 1, ...) the mean of `values` (B, T, ...) over each item's positions, its pads left out."""
    if lengths is None:
        return values.mean(dim=1, keepdim=True)
    real = real_positions(lengths, values.shape[1])  # (B, T)
    real = real.view(*real.shape, *[1] * (values.dim() - 2)).to(values.dtype)  # (B, T, 1, ...)
    return (values * real).sum(dim=1, keepdim=True) / real.sum(dim=1, keepdim=True)  # (B, 1, ...)


def contexts_on(model_forward: Callable[[], Any], attention: nn.Module, heads: int) -> Tensor:
    """(1, T, H, hs) the layer's context vectors in the forward `model_forward` runs."""
    kept: list[Tensor] = []

    def keep(values: Tensor) -> Tensor:
        kept.append(values.detach().clone())
        return values

    with head_contexts(attention, heads, keep):
        model_forward()
    return kept[-1]
