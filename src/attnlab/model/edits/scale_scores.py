"""intervene=scale_scores: the scores entering the softmax multiplied by `intervene.factor` (one head, or
every head without `intervene.head`), the model's mask put back after, whatever its fill."""

from __future__ import annotations

from collections.abc import Callable, Collection
from contextlib import AbstractContextManager
from typing import Any

import torch
from torch import Tensor, nn
from torch.overrides import TorchFunctionMode

from attnlab.diagnosis.masking import fill_masked
from attnlab.model.edits.kind_base import Chosen, EditKind
from attnlab.modules.built import PluginError


class ScaleScores(EditKind):
    needs = "factor"
    shown = ("factor",)
    stage = "scaled_scores"

    def edit(self, attention: nn.Module, chosen: Chosen, heads: int, patched: Tensor | None,
             lengths: tuple[int, ...] | None) -> AbstractContextManager[object]:
        return ScaledScores(chosen.factor, chosen.head)


class ScaledScores(TorchFunctionMode):
    """The softmax's input (the scores, after the layer's own scaling and mask) times `factor`, on one
    head or all; the model's mask put back after (a fill times the factor would be no mask: times 0 a
    score of 0, times -1 the largest)."""

    def __init__(self, factor: float, head: int | None) -> None:
        super().__init__()
        self.factor, self.head = factor, head
        self.scaled = False

    def __exit__(self, *exc_info: Any) -> None:
        super().__exit__(*exc_info)  # type: ignore[no-untyped-call]  # unannotated in torch (TorchFunctionMode)
        if exc_info[0] is None and not self.scaled:  # a fused kernel: the scores were never there to scale
            raise PluginError("intervene=scale_scores: the layer called no softmax on (batch, heads, T, T) scores "
                              "(a fused kernel computes them unseen); run it with model.attn_implementation=eager")

    def __torch_function__(self, func: Callable[..., Any], types: Collection[type], args: tuple[Any, ...] = (),
                           kwargs: dict[str, Any] | None = None) -> Any:
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


KIND = ScaleScores()
