"""A top-k of a score product: keys selected, not attended (a sparse indexer, DeepSeek-V3.2's DSA).

An indexer multiplies its own queries with its own keys (`wq_b`, `wk`), weighs the heads' ReLU'd
products into one score per (query, key) and keeps each query's top-k keys; the attention then masks
the others before its softmax. Its product looks like scores, but nothing of its values reaches the
output except the integer indices of the top-k, so it is not a head of the module: the head that made
it is marked as a selector (attnlab.capture.result leaves it out of the stages), the indices are read
as which keys each query keeps, and they carry no tag (the mask built from them is a mask, not a term
computed from the scores); the top-k values stay derived from the scores, as any op's result."""

from __future__ import annotations

from typing import Any

import torch

from attnlab.capture.provenance import ATTENTION, Recording, propagate

SELECTIONS = {"topk"}
_FROM_SCORES = (*ATTENTION, "context")  # a head's scores, or the heads' products weighed into one score


def select(rec: Recording, args: tuple[Any, ...], kwargs: dict[str, Any], out: Any) -> None:
    """Record `scores.topk(k, dim)` of a head's scores on that head: k, the candidates, and which
    candidates each row keeps (a bool of the scores' shape, the candidates last). The values are tagged
    as any op's result, the indices not."""
    values = getattr(out, "values", None)
    if values is not None:
        propagate(rec, None, "topk", args, kwargs, values)
    scores = args[0] if args else kwargs.get("input")
    tag = rec.tag(scores)
    if tag is None or tag.kind not in _FROM_SCORES or tag.head is None or not isinstance(scores, torch.Tensor):
        return
    k = args[1] if len(args) > 1 else kwargs.get("k")
    dim = args[2] if len(args) > 2 else kwargs.get("dim", -1)
    indices = getattr(out, "indices", None)
    if not isinstance(k, int) or not isinstance(dim, int) or not isinstance(indices, torch.Tensor) or scores.dim() == 0:
        return
    kept = torch.zeros(scores.shape, dtype=torch.bool, device=scores.device).scatter(dim, indices, True)
    head = rec.heads[tag.head]
    head.selects = (k, scores.shape[dim])
    head.selected = kept.movedim(dim, -1)  # (..., query, candidates)
