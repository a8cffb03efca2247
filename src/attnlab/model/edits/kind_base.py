"""What an intervention kind declares (`intervene=NAME`): the settings it cannot run without and the ones
its name shows, the stage it changes first, whether it needs another text's run, and its edit."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from typing import ClassVar, Protocol

from torch import Tensor, nn

from attnlab.model.edits.head_hooks import head_contexts


class Chosen(Protocol):
    """The `intervene` block, checked (attnlab.model.interventions.Intervention, frozen: its fields read-only)."""

    @property
    def kind(self) -> str: ...
    @property
    def head(self) -> int | None: ...  # None: every head
    @property
    def mode(self) -> str: ...
    @property
    def factor(self) -> float: ...
    @property
    def text(self) -> str | None: ...
    @property
    def function(self) -> str | None: ...


class EditKind:
    """An edit made to one attention layer while the model runs; the default is no edit (observe)."""

    needs: ClassVar[str | None] = None  # the setting intervene=NAME refuses to run without
    # the settings with a default that its label and run folder show (head, text, function show when given)
    shown: ClassVar[tuple[str, ...]] = ()
    stage: ClassVar[str] = "context"  # the first stage it changes: its finding measures it there
    changes: ClassVar[bool] = True  # False: every layer from one forward, no effect to measure (no metric)
    other_text: ClassVar[bool] = False  # True: its values come from the layer run on intervene.text
    heads_known: ClassVar[bool] = True  # False: the heads it changed are found from the stages
    per_head: ClassVar[bool] = True  # False: intervene.head=all (one edit per head) means nothing to it

    def edit(self, attention: nn.Module, chosen: Chosen, heads: int, patched: Tensor | None,
             lengths: tuple[int, ...] | None) -> AbstractContextManager[object]:
        """The edit in force for one call of the layer. `patched`: (1, T, H, hs) the other text's
        context vectors; `lengths`: a padded batch's texts' tokens."""
        return nullcontext()

    def what(self, chosen: Chosen) -> str:
        """What it did to the context vectors, as its finding says it."""
        return "edited"


class ContextKind(EditKind):
    """An edit of the heads' context vectors (1, T, H, hs), the output projection's input."""

    def edit(self, attention: nn.Module, chosen: Chosen, heads: int, patched: Tensor | None,
             lengths: tuple[int, ...] | None) -> AbstractContextManager[object]:
        replace: Callable[[Tensor], Tensor] = lambda values: self.contexts(chosen, values, patched, lengths)  # noqa: E731
        return head_contexts(attention, heads, replace)

    def contexts(self, chosen: Chosen, values: Tensor, patched: Tensor | None,
                 lengths: tuple[int, ...] | None) -> Tensor:
        """(1, T, H, hs) the context vectors `values` (1, T, H, hs) become."""
        raise NotImplementedError
