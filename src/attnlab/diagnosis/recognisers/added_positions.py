"""Absolute position embeddings added to the hidden states the queries and keys are projected
from, never the values' (DETR's and its successors' sine and learned embeddings of image locations
and object queries): `q = (x + p) @ W_query`, `k = (x + p) @ W_key`, `v = x @ W_value`."""

from __future__ import annotations

from attnlab.diagnosis.context import Pair
from attnlab.diagnosis.finding_code import Code, finds
from attnlab.diagnosis.recognisers.recogniser import recogniser
from attnlab.record import Finding

ADDED_POSITIONS = Code(
    "added_positions", ("queries",), "info",
    "position embeddings added to the input of the query and key projections, not the values' (DETR)",
    "position embeddings added to the hidden states before the query and key projections (as DETR adds its sine or "
    "learned embeddings of image locations and object queries): the queries and keys differ from the reference's by "
    "an offset that depends on the token alone, the same in every batch item ({tokens} tokens, {items} items), and "
    "the values do not; the scores, weights and context differ from the reference's from here on.",
    "queries and keys each differ from the reference's by an offset per token, the same in every batch item and not "
    "the same for every token, the values not at all: `(x + p) @ W_query`, `(x + p) @ W_key`, `x @ W_value`, as "
    "DETR-like detection and segmentation models add their position embeddings. Keys used as queries, or offsets "
    "that follow the input, are not this and stay `query_source` / `key_index` errors",
    ("tests/diagnosis/test_added_positions.py::test_detr_s_added_positions_are_named_not_a_query_source",),
    "deliberate")


@finds(ADDED_POSITIONS)
@recogniser
def added_positions(p: Pair) -> list[Finding]:
    queries, keys = p.both("queries"), p.both("keys")
    if queries is None or keys is None or queries[0].dim() != 4 or queries[0].shape[0] < 2:
        return []  # one batch item cannot tell an offset per token from one that follows the input
    if not (p.changed("queries") and p.changed("keys")) or ("values" in p.v.stages and p.changed("values")):
        return []
    for stage, (mine, ref) in (("queries", queries), ("keys", keys)):
        offset = mine.double() - ref  # (b, heads, T, head_dim)
        tol = 4 * p.tolerance(stage)
        if float((ref - ref[:1]).abs().max()) <= tol:
            return []  # batch items alike (the book's stacked rows): any change would be the same in each
        if float((offset - offset[:1]).abs().max()) > tol:
            return []  # it follows the input: not a position's
        if float((offset - offset[:, :, :1]).abs().max()) <= tol:
            return []  # the same for every token: a bias, not a position
    return [ADDED_POSITIONS("queries", tokens=queries[0].shape[-2], items=queries[0].shape[0])]
