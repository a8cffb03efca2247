"""The pipeline's stages, in the order the source computes them, and their named axes.

Declared once, read everywhere (as TransformerLens declares its hook shapes), with the functions
that make the canonical view from a module's own tensors. Every consumer —
diagnostics, findings, the record, the sinks — works on the canonical view below; the record and
the terminal also show each stage in the module's own rank (SelfAttention_v1's weights (6, 6),
CausalAttention's (2, 6, 6), MultiHeadAttention's (2, 2, 6, 6)).

Pipeline order matters: `first_divergent_stage` and the diagnosis walk the stages in this order,
because a wrong early stage makes every later one wrong.
"""

from __future__ import annotations

import torch

STAGES: tuple[str, ...] = (
    "inputs",
    "queries",
    "keys",
    "values",
    "scores",
    "scaled_scores",
    "weights",
    "weights_applied",  # only when it differs from weights: the tensor multiplied with the values (after dropout)
    "context",
    "output",
)

AXES: dict[str, tuple[str, ...]] = {
    "inputs": ("batch", "tokens", "d_in"),
    "queries": ("batch", "heads", "tokens", "head_dim"),
    "keys": ("batch", "kv_heads", "tokens", "head_dim"),
    "values": ("batch", "kv_heads", "tokens", "head_dim"),
    "scores": ("batch", "heads", "query", "key"),
    "scaled_scores": ("batch", "heads", "query", "key"),
    "weights": ("batch", "heads", "query", "key"),
    "weights_applied": ("batch", "heads", "query", "key"),
    "context": ("batch", "heads", "tokens", "head_dim"),  # weights @ values, per head
    "output": ("batch", "tokens", "width"),  # the module's return value
}

# stages that may be larger than the tokens: (.., query, key)
SQUARE_STAGES: tuple[str, ...] = ("scores", "scaled_scores", "weights", "weights_applied")


# The canonical view above, made from a stage in the module's own rank (views, never copies).


def canonical(tensor: torch.Tensor, batch: int) -> torch.Tensor | None:
    """A per-head stage as (batch, heads, tokens, ·): 2-D and 3-D modules gain size-1 axes,
    a merged (batch * heads, ...) axis (nn.MultiheadAttention's bmm) is split again."""
    if tensor.dim() == 2:
        return tensor[None, None]
    if tensor.dim() == 3 and tensor.shape[0] == batch:
        return tensor.unsqueeze(1)
    if tensor.dim() == 3 and tensor.shape[0] % batch == 0:
        return tensor.reshape(batch, tensor.shape[0] // batch, *tensor.shape[1:])
    if tensor.dim() == 4:
        return tensor
    while tensor.dim() > 4 and tensor.shape[0] == 1:
        tensor = tensor[0]
    return tensor if tensor.dim() == 4 else None


def canonical_axis(dim: int, tensor: torch.Tensor, batch: int) -> int:
    """A dim of a per-head stage in the module's own rank, as the axis of its canonical view."""
    if tensor.dim() == 2:
        return dim + 2
    if tensor.dim() == 3:
        return dim + 1 if dim > 0 else (0 if tensor.shape[0] == batch else 1)
    return dim


def canonical_tokens(tensor: torch.Tensor) -> torch.Tensor | None:
    """The inputs or the output as (batch, tokens, width)."""
    if tensor.dim() == 2:
        return tensor[None]
    if tensor.dim() == 1:
        return tensor[None, :, None]
    while tensor.dim() > 3 and tensor.shape[0] == 1:
        tensor = tensor[0]
    return tensor if tensor.dim() == 3 else None
