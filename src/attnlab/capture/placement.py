"""Which captured stages sit where the canonical view says, and why the others do not.

A stage is placed when its canonical view has the input's batch items on its batch axis and one
row per token (a (query, key) stage: one row per query). A module that folds its heads into the
batch (einops' `(b h) n d`), cuts the tokens into windows, splits each head into sub-heads whose
softmax maps are combined before the values, or multiplies one softmax map with each part of a
split V (differential attention's two calls) computes stages attnlab cannot put in that view: they stay in the capture for what the module's own numbers show (its scale, its softmax's axis),
but are named "not observable" and never compared with the reference.
"""

from __future__ import annotations

import torch

from attnlab.capture.stages import AXES

_PER_HEAD = tuple(stage for stage, axes in AXES.items() if axes[0] == "batch" and len(axes) == 4)


def unplaced(found: dict[str, torch.Tensor], batch: int, tokens: int) -> dict[str, str]:
    """Each per-head stage whose canonical view does not hold (batch, ·, tokens, ·): why, in words
    (the shape the module made it in is the capture's native shape)."""
    return {stage: f"not {batch} batch items of {tokens} rows each (heads folded into the batch, tokens cut "
                   f"into windows)" for stage in _PER_HEAD
            if (view := found.get(stage)) is not None and (view.shape[0] != batch or view.shape[2] != tokens)}


def sub_heads(heads_with_context: int, heads: int) -> str:
    """Why the per-head stages of score products combined before the values are not the module's heads."""
    return (f"{heads} score products, {heads_with_context} of them multiplied with the values: the others' "
            f"softmax maps are combined with them first (sub-heads), so no single map is a head's weights")


def split_values(products: int) -> str:
    """Why the values and context of weights multiplied with several values tensors are not a head's."""
    return (f"the same weights multiplied with {products} different values tensors, their contexts combined "
            f"afterwards (a split V), so no single one is a head's values or context")


TOKEN_MIXED = ("convolved over the tokens after its projection (a short convolution: Inkling 2's sconv, ZAYA's CCA), "
               "so each row mixes its token's projection with its neighbours' and none is x @ W of its own token")
