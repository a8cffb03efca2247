"""Sparse attention by a key selector (DeepSeek-V3.2's DSA indexer): each query keeps its top-k keys
by a score the class computes with projections of its own, and the rest are masked before the softmax.

The capture sets the selector's score product apart (attnlab.capture.selection) and records which
keys each query kept; the selection is named only where the softmax input masks exactly the keys the
reference masks and those the selector dropped, so a mask applied wrongly is still the mask checks'."""

from __future__ import annotations

import torch

from attnlab.diagnosis.context import Pair
from attnlab.diagnosis.finding_code import Code, finds
from attnlab.diagnosis.recognisers.recogniser import recogniser
from attnlab.record import Finding

SPARSE_KEYS = Code(
    "sparse_keys", ("scaled_scores",), "info",
    "each query attends only to the top-k keys a selector of the class's own scores picks (a sparse indexer, DSA)",
    "sparse keys: a selector (an indexer, DeepSeek-V3.2's DSA) scores the keys with projections of its own and "
    "keeps each query's top {k} of {n} candidates; the softmax input masks the others: {dropped}. The selector's "
    "own product is not a head of the attention and is not compared; the heads' scores, mask, scaling, softmax and "
    "weights @ values still are.",
    "a selector scores the keys with projections of its own (`wq_b`, `wk`, DeepSeek-V3.2's DSA indexer) and keeps "
    "each query's top k; the softmax input masks the keys it drops. Reports k, the candidates and the (query, key) "
    "entries dropped beyond the reference's mask; named only when the masked entries are exactly the reference's "
    "and the dropped ones, so a mask applied wrongly is still a mask finding",
    ("tests/diagnosis/test_sparse_keys.py::test_indexer_class_is_named_sparse_keys_with_no_error",), "deliberate")


@finds(SPARSE_KEYS)
@recogniser
def sparse_keys(p: Pair) -> list[Finding]:
    if p.v.key_selection is None:
        return []
    k, n = p.v.key_selection
    pair = p.both("scaled_scores")
    if pair is None or pair[0].dim() != 4:
        return []
    mine, ref = torch.isneginf(pair[0]), torch.isneginf(pair[1])  # (b, h, q, k): masked entries
    kept = p.v.selected_keys
    expected = ref if kept is None else ref | ~kept.to(ref.device)  # candidates not the keys: nothing dropped known
    if not torch.equal(mine, expected):
        return []
    dropped = int((mine & ~ref).sum())
    batch, heads = mine.shape[:2]
    words = (f"{dropped} entries of its {batch} x {heads} (query, key) maps the reference attends to" if dropped else
             "none the reference attends to" + (" (every key is kept at these tokens)" if kept is not None else
                                               " (its candidates are pools of keys, not shown one by one)"))
    return [SPARSE_KEYS("scaled_scores", k=k, n=n, dropped=words)]
