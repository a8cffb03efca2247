"""Multi-head latent attention (DeepSeek's MLA): keys and values expanded per head from one latent
every head shares, each head's key ending in the same rotary columns (the decoupled RoPE key).

Its projections (down to the latent, a norm, up to the heads) have no counterpart in the
reference's, so no weights are shared and its stages are not the reference's numbers; the
per-head widths it declares are not a projection of the wrong width."""

from __future__ import annotations

import torch

from attnlab.diagnosis.context import Pair
from attnlab.diagnosis.finding_code import Code, finds
from attnlab.diagnosis.recognisers.recogniser import recogniser
from attnlab.record import Finding


def shared_key_columns(keys: torch.Tensor) -> int:
    """How many trailing columns of keys (b, heads, tokens, head_dim) are the same in every head,
    0 when all or none are (one key/value head repeated is grouped-query attention, not a latent)."""
    heads, width = keys.shape[1], keys.shape[-1]
    if heads < 2:
        return 0
    same = (keys == keys[:, :1]).flatten(0, 2).transpose(0, 1).flatten(1).all(dim=1)  # (head_dim,) columns
    shared = int(same.flip(0).cumprod(0).sum())  # the trailing run of columns equal over the heads
    return shared if 0 < shared < width else 0


LATENT_ATTENTION = Code(
    "latent_attention", ("keys",), "info",
    "keys and values expanded per head from a shared latent, each key ending in the shared RoPE key (MLA)",
    "multi-head latent attention (DeepSeek's MLA): each head's key ends in the same {rope} rotary columns, the "
    "decoupled RoPE key every head shares, its other {own} its own, expanded with the values from one compressed "
    "latent; queries and keys have {qk} columns per head, the values {v}, the reference's heads {theirs}. Deliberate: "
    "its projections have no counterpart in the reference's, so the two are not compared number for number; each "
    "side's own mask, scaling, softmax and weights @ values still are.",
    "multi-head latent attention (DeepSeek's MLA): each head's key ends in columns every head shares (the decoupled "
    "RoPE key) while the rest are its own; reports those columns and the per-head widths, which are then not a "
    "`shape_projection`. Its projections have no counterpart in the reference's, so only each side's own mask, "
    "scaling, softmax and weights @ values are checked, not the numbers against each other",
    ("tests/diagnosis/test_recognisers.py::test_deepseek_latent_attention_is_named_not_a_projection_width",),
    "deliberate")


@finds(LATENT_ATTENTION)
@recogniser
def latent_attention(p: Pair) -> list[Finding]:
    """Keys whose trailing columns every head shares while the rest differ per head: MLA's
    decoupled RoPE key, named with the per-head widths it declares. Read from the variant alone."""
    keys, queries, values = (p.v.stages.get(s) for s in ("keys", "queries", "values"))
    if keys is None or queries is None or values is None or keys.dim() != 4 or queries.shape[-1] != keys.shape[-1]:
        return []
    rope = shared_key_columns(keys)
    their_keys = p.ref.stages.get("keys")
    if rope == 0 or (their_keys is not None and their_keys.dim() == 4 and shared_key_columns(their_keys) == rope):
        return []  # none, or the reference's own latent attention (its eager path against its sdpa)
    qk, v = keys.shape[-1], values.shape[-1]
    theirs = their_keys.shape[-1] if their_keys is not None else qk
    return [LATENT_ATTENTION("keys", rope=rope, own=qk - rope, qk=qk, v=v, theirs=theirs)]
