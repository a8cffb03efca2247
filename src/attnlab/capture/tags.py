"""What the capture knows of a tensor: its tag (where it comes from), and the step of a
hand-written softmax it is on the way through."""

from __future__ import annotations

from typing import NamedTuple

import torch


class SoftmaxStep(NamedTuple):
    """A step of a hand-written softmax: exp(logits * factor - max) / sum(..., dim)."""

    step: str  # "max" | "shifted" | "exp" | "expsum" | "logsoftmax"
    logits: torch.Tensor
    factor: float = 1.0
    dim: int | None = None


class Tag(NamedTuple):
    kind: str  # "input" | "param" | "proj" | "scores" | "derived" (from scores) | "weights" | "context"
    role: str | None = None  # "param"/"proj": the projection role of the parameter
    factor: float = 1.0  # "param"/"proj": the scalar the tensor was multiplied by since the projection;
    # "scores"/"derived": since the score product (nan once an op it does not pass through touched them)
    base: torch.Tensor | None = None  # the same tensor without that factor (same shape); None: divide on use
    softmax: SoftmaxStep | None = None  # "derived" on the way to a hand-written softmax
    head: int | None = None  # "scores"/"derived"/"weights"/"context": which score product it comes from
    columns: torch.Tensor | None = None  # a fused projection's output column of each element (same shape)
    column_roles: torch.Tensor | None = None  # (fused width,) each fused column's index in QKV_ROLES
    items: torch.Tensor | None = None  # "input": the batch item of each element (same shape)
    item: int | None = None  # "proj": the one batch item it was projected from, when one (a loop over the batch)
    terms: bool = False  # "derived": a term the module computes from its inputs or weights was added to the scores
    mixed: bool = False  # "proj": convolved over the tokens since the projection, each row a mix of its neighbours'
    table: bool = False  # "proj": a projection of what is not the inputs (XLNet's relative positions by its `r`)
    own: bool = False  # "proj": made by a parameter of no role, never a fused one (ConvBERT's conv_kernel_layer)
