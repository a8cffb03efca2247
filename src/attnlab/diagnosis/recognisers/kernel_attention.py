"""Attention without a softmax: a context that is a kernel attention of the queries and keys."""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F

from attnlab.diagnosis.context import Pair
from attnlab.diagnosis.recognisers.recogniser import each_head
from attnlab.diagnosis.stage_blocks import max_abs

_FEATURE_MAPS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "elu + 1, a non-negative kernel": lambda x: F.elu(x) + 1,
    "the identity, so the weights can be negative (the scores normalised by their row sums)": lambda x: x,
}


def linear_attention(p: Pair) -> tuple[str, str] | None:
    """A context that is phi(q) phi(k)^T, causal, normalised per row or not, times the values: phi
    and how the rows are normalised, in words (the softmax check says it as `not_softmax`)."""
    s = p.v.stages
    if "weights" in s or not all(stage in s for stage in ("queries", "keys", "values", "context")):
        return None
    queries, keys, values, context = (s[stage] for stage in ("queries", "keys", "values", "context"))
    if queries.dim() != 4 or keys.shape[1] == 0 or queries.shape[1] % keys.shape[1]:
        return None
    group = queries.shape[1] // keys.shape[1]  # query heads per key/value head
    if (keys.shape[:3] != values.shape[:3] or context.shape[:3] != queries.shape[:3]
            or queries.shape[-1] != keys.shape[-1]):
        return None
    n = queries.shape[-2]
    causal = torch.ones(n, n, dtype=torch.bool).tril()
    tol = 1e-4 * max(max_abs(context), 1e-12) + 1e-6
    for name, phi in _FEATURE_MAPS.items():
        for normalised in (True, False):
            if all(_kernel_attention(phi, normalised, causal, queries[b, h].double(), keys[b, h // group].double(),
                                     values[b, h // group].double(), context[b, h].double(), tol)
                   for b, h in each_head(queries)):
                return name, "normalised to sum 1 per row" if normalised else "not normalised (rows do not sum to 1)"
    return None


def _kernel_attention(phi: Callable[[torch.Tensor], torch.Tensor], normalised: bool, causal: torch.Tensor,
                      q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, context: torch.Tensor, tol: float) -> bool:
    """Whether one head's context is (phi(q) phi(k)^T, causal, per-row normalised or not) @ v."""
    kernel = (phi(q) @ phi(k).T).masked_fill(~causal, 0.0)  # (tokens, tokens)
    weights = kernel / kernel.sum(dim=-1, keepdim=True) if normalised else kernel
    return bool((weights @ v - context).abs().max() <= tol)
