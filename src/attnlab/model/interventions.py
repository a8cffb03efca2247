"""Edits to one attention layer of a model, declared as data (`intervene=KIND intervene.head=H`).

The kinds (observe, ablate_head, scale_scores, patch, function) are attnlab.model.edits.KINDS, one
file each, applied to the layer `layer=` names while the model runs.
`intervene.metric=MODULE:NAME` adds a measure of one's own to the edit's effect (attnlab.model.user_metric).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any

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

    @property
    def label(self) -> str:
        """How the record names it: ablate_head(head=0, mode=mean)."""
        own = KINDS[self.kind].shown
        shown = {"head": self.head, "mode": self.mode if "mode" in own else None,
                 "factor": self.factor if "factor" in own else None, "text": self.text, "function": self.function}
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
    needs = KINDS[kind].needs
    if needs and block.get(needs) is None:
        raise UserError(f"intervene={kind}: needs intervene.{needs}=...")
    function, metric = (None if block.get(key) is None else str(block[key]) for key in ("function", "metric"))
    if function is not None:
        resolve("intervene.function", function, TAKES)
    if metric is not None:
        if not KINDS[kind].changes:
            raise UserError(f"intervene.metric={metric}: intervene={kind} changes nothing, so there is no effect to measure")
        user_metric(metric)  # imported and named now, before the model loads
    return Intervention(kind, head, mode, float(factor), block.get("text"), function, metric)


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
