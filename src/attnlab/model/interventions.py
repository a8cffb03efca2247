"""Edits to one attention layer of a model, declared as data (`intervene=KIND intervene.head=H`).

The kinds (observe, ablate_head, scale_scores, patch, function) are attnlab.model.edits.KINDS, one
file each, applied to the layer `layer=` names while the model runs.
`intervene.metric=MODULE:NAME` adds a measure of one's own to the edit's effect (attnlab.model.user_metric).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass, replace
from typing import Any, Literal

from torch import Tensor, nn

from attnlab.errors import UserError
from attnlab.model.edits import KINDS
from attnlab.model.edits.user_function import TAKES
from attnlab.model.user_callables import resolve
from attnlab.model.user_metric import user_metric

MODES = ("zero", "mean")
KEYS = {"name", "head", "mode", "factor", "text", "function", "metric"}


@dataclass(frozen=True)
class Intervention:
    kind: str
    head: int | None = None  # None: every head
    mode: str = "zero"
    factor: float = 1.0
    text: str | None = None
    function: str | None = None
    metric: str | None = None  # MODULE:NAME of a measure of one's own (attnlab.model.user_metric)
    # intervene.head=all or a list: one edit per head, each its own forward, in one run (None: one edit)
    each_head: tuple[int, ...] | Literal["all"] | None = None

    @property
    def label(self) -> str:
        """How the record names it: ablate_head(head=0, mode=mean), ablate_head(head=all, mode=zero)."""
        own = KINDS[self.kind].shown
        head = self.head if self.each_head is None else _heads_shown(self.each_head)
        shown = {"head": head, "mode": self.mode if "mode" in own else None,
                 "factor": self.factor if "factor" in own else None, "text": self.text, "function": self.function}
        inside = ", ".join(f"{key}={value!r}" if key == "text" else f"{key}={value}"
                           for key, value in shown.items() if value is not None)
        return f"{self.kind}({inside})" if inside else self.kind

    def heads(self, n_heads: int) -> tuple[int, ...]:
        """The heads edited one at a time (intervene.head=all or a list), checked against the model's count."""
        heads = tuple(range(n_heads)) if self.each_head == "all" else tuple(self.each_head or ())
        wrong = next((head for head in heads if head >= n_heads), None)
        if wrong is not None:
            raise UserError(f"intervene.head={wrong}: the model has {n_heads} heads (0 to {n_heads - 1})")
        return heads

    def one(self, head: int) -> Intervention:
        """The single edit of `head` (one cell of a layer x head sweep)."""
        return replace(self, head=head, each_head=None)


def _heads_shown(each_head: tuple[int, ...] | str) -> str:
    return each_head if isinstance(each_head, str) else "[" + ",".join(map(str, each_head)) + "]"


def _each_head(kind: str, head: Any) -> tuple[int, ...] | Literal["all"] | None:
    """intervene.head=all or a list of head indices (one edit per head); None for one head or none."""
    if head != "all" and not isinstance(head, (list, tuple)):
        return None
    if not KINDS[kind].per_head:
        raise UserError(f"intervene.head={head}: intervene={kind} makes no edit per head; one edit per head is "
                        f"for {', '.join(name for name, each in KINDS.items() if each.per_head)}")
    if head == "all":
        return "all"
    if not head or any(isinstance(h, bool) or not isinstance(h, int) or h < 0 for h in head):
        raise UserError(f"intervene.head={list(head)}: must be head indices (0, 1, ...), a list of them or all")
    return tuple(dict.fromkeys(head))  # each head once, in the order given


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
    each_head = _each_head(kind, head)
    if each_head is not None:
        head = None
    elif head is not None and (isinstance(head, bool) or not isinstance(head, int) or head < 0):
        raise UserError(f"intervene.head={head}: must be a head index (0, 1, ...), a list of them or all")
    mode = str(block.get("mode") or "zero")
    if mode not in MODES:
        raise UserError(f"intervene.mode={mode}: allowed are {', '.join(MODES)}")
    factor = block.get("factor", 1.0)
    if isinstance(factor, bool) or not isinstance(factor, (int, float)):
        raise UserError(f"intervene.factor={factor}: must be a number")
    needs = KINDS[kind].needs
    if needs and block.get(needs) is None and not (needs == "head" and each_head is not None):
        raise UserError(f"intervene={kind}: needs intervene.{needs}=...")
    function, metric = (None if block.get(key) is None else str(block[key]) for key in ("function", "metric"))
    if function is not None:
        resolve("intervene.function", function, TAKES)
    if metric is not None:
        if not KINDS[kind].changes:
            raise UserError(f"intervene.metric={metric}: intervene={kind} changes nothing, so there is no effect to measure")
        user_metric(metric)  # imported and named now, before the model loads
    return Intervention(kind, head, mode, float(factor), block.get("text"), function, metric, each_head)


class Intervened(nn.Module):
    """The layer's own attention, called with the edit in force, in the layer's place."""

    def __init__(self, attention: nn.Module, edit: Callable[[], AbstractContextManager[object]]) -> None:
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
    kind = KINDS[chosen.kind]
    return Intervened(attention, lambda: kind.edit(attention, chosen, heads, patched, lengths))
