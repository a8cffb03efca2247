"""The hooks an edit works through: every head's context vectors at the layer's output projection."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from torch import Tensor, nn

from attnlab.capture.recorder import tap
from attnlab.errors import UserError
from attnlab.model.inputs import real_positions
from attnlab.modules.roles import module_roles

ContextEdit = Callable[[Tensor], Tensor]  # (1, T, H, hs) -> (1, T, H, hs)


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
    def pre(_module: nn.Module, args: tuple[Any, ...]) -> tuple[Any, ...]:
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


def contexts_on(model_forward: Callable[[], Any], attention: nn.Module, heads: int) -> Tensor:
    """(1, T, H, hs) the layer's context vectors in the forward `model_forward` runs."""
    kept: list[Tensor] = []

    def keep(values: Tensor) -> Tensor:
        kept.append(values.detach().clone())
        return values

    with head_contexts(attention, heads, keep):
        model_forward()
    return kept[-1]


def position_mean(values: Tensor, lengths: tuple[int, ...] | None) -> Tensor:
    """(B, 1, ...) the mean of `values` (B, T, ...) over each item's positions, its pads left out."""
    if lengths is None:
        return values.mean(dim=1, keepdim=True)
    real = real_positions(lengths, values.shape[1])  # (B, T)
    real = real.view(*real.shape, *[1] * (values.dim() - 2)).to(values.dtype)  # (B, T, 1, ...)
    return (values * real).sum(dim=1, keepdim=True) / real.sum(dim=1, keepdim=True)  # (B, 1, ...)
