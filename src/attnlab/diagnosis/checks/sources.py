"""Where queries, keys and values come from, and how they meet in the scores (sections 3.3-3.4)."""

from __future__ import annotations

import torch

from attnlab.diagnosis.context import Context, Found
from attnlab.diagnosis.finding_code import Code, finds
from attnlab.record import Finding

PROJECTIONS = {"queries": "W_query", "keys": "W_key", "values": "W_value"}

SHAPE_PROJECTION = Code(
    "shape_projection", ("queries", "keys", "values", "output"), "error",
    "a projection of the wrong width (d_in for d_out), or every head built with the whole d_out",
    {"width": "{stage} have {cols} columns where {wanted} was expected: the {matrix} projection probably used {cause} "
              "where it should have used {right}.",
     "undivided": "{each}: {cause}",
     "undivided_output": "the output has {width} columns where the reference has d_out={ref_width} "
                         "(num_heads·d_out): {each}, because {cause}"},
    "a projection produced `d_in` columns where `d_out` was expected; or the undivided wrapper: d_out per head, "
    "num_heads·d_out output columns (at the first projection when an output projection restores the width)",
    ("d_in_projection", "impl_wrapper_undivided"), "book")

SCORES_TRANSPOSED = Code(
    "scores_transposed", ("scores",), "error",
    "the scores are keys @ queries.T",
    "scores are the reference's scores transposed (keys @ queries.T): row i holds key i against every query, where "
    "queries @ keys.T was expected; swap the operands so each row is one query.",
    "the scores are `keys @ queries.T`",
    ("transposed_scores",), "book")

QUERY_SOURCE = Code(
    "query_source", ("queries",), "error",
    "the queries are not x @ W_query (e.g. the keys used as queries)",
    {"source": "queries come from the {matrix} projection where x @ W_query was expected; check which weight matrix "
               "the queries line multiplies by.",
     "values": "queries ({origin}) do not match x @ W_query of the same tokens; check the queries line: the input "
               "rows and the weight matrix it uses."},
    "the queries are not `x @ W_query` (e.g. the keys used as queries)",
    ("keys_as_queries",), "book")

KEY_INDEX = Code(
    "key_index", ("keys",), "error",
    "the keys are misaligned with their tokens (e.g. shifted by one row)",
    {"source": "keys come from the {matrix} projection where x @ W_key was expected, so no key row belongs to its "
               "token; check the keys line.",
     "shifted": "keys row i matches reference row i{shift:+d} (the key rows are shifted by one token), so each query "
                "is scored against its neighbour's key; check the key index (Python counts from 0) and any roll or "
                "slice of keys.",
     "values": "keys do not match x @ W_key row for row, so queries are scored against the wrong key rows; check the "
               "key index and the keys line."},
    "the keys are misaligned with their tokens (e.g. shifted by one row)",
    ("shifted_keys",), "book")

VALUE_PATH = Code(
    "value_path", ("values",), "error",
    "the weights equal the reference's but the context does not: only the values changed",
    {"context": "the attention weights match the reference but the context does not: only the values "
                "changed{origin}; the values line should be x @ W_value.",
     "source": "values come from {matrix} where x @ W_value was expected, so the context combines the wrong "
               "vectors; check the values line."},
    "the weights equal the reference's but the context does not: only the values changed",
    ("values_from_key",), "book")


@finds(SHAPE_PROJECTION)
def shapes(ctx: Context, found: Found) -> list[Finding]:
    """A projection of the wrong width (d_in where d_out was meant), or every head built with d_out."""
    d_in = ctx.v.stages["inputs"].shape[-1]
    out, undivided = [], []
    for stage, matrix in PROJECTIONS.items():
        if not ctx.present(stage) or stage not in ctx.ref.stages or not ctx.pair.observed(stage):
            continue
        cols, expected = ctx.v.stages[stage].shape[-1], ctx.ref.stages[stage].shape[-1]
        if cols == expected:
            continue
        cause = "d_in" if cols == d_in else f"{cols}"
        heads = ctx.ref.stages[stage].shape[1]
        per_head = heads > 1
        wanted = f"head_dim={expected} per head" if per_head else f"d_out={expected}"
        if per_head and cols == heads * expected:  # the wrapper's heads built with d_out each
            undivided.append((stage, cols, expected))
            continue
        out.append(SHAPE_PROJECTION(stage, "width", stage=stage, cols=cols, wanted=wanted, matrix=matrix, cause=cause,
                                    right="d_out // num_heads" if per_head else "d_out"))
    return out + (_undivided_heads(ctx, undivided) if undivided else [])


def _undivided_heads(ctx: Context, undivided: list[tuple[str, int, int]]) -> list[Finding]:
    """Every head built with the whole d_out: one finding, where the learner sees it (the output's
    width) when that differs, else at the first projection."""
    stages = ", ".join(stage for stage, _, _ in undivided)
    _, cols, expected = undivided[0]
    width, ref_width = ctx.v.stages["output"].shape[-1], ctx.ref.stages["output"].shape[-1]
    heads = f"each head's {stages} have {cols} columns where head_dim={expected} per head was expected"
    cause = f"every head got the full d_out={cols} instead of d_out // num_heads; give each head d_out // num_heads."
    if width == ref_width:  # an output projection took the merged heads back to d_out
        return [SHAPE_PROJECTION(undivided[0][0], "undivided", each=heads, cause=cause)]
    return [SHAPE_PROJECTION("output", "undivided_output", width=width, ref_width=ref_width, each=heads, cause=cause)]


@finds(SCORES_TRANSPOSED)
def scores_transposed(ctx: Context, found: Found) -> list[Finding]:
    """keys @ queries.T: the roles are swapped, or the scores equal the reference's transposed."""
    by_sources = ctx.v.score_roles == ("keys", "queries")
    by_values = (ctx.compare("scores", found) and ctx.differs("scores")
                 and not ctx.differs("scores", ctx.v.stages["scores"].mT))
    if not (by_sources or by_values):
        return []
    return [SCORES_TRANSPOSED("scores")]


@finds(QUERY_SOURCE)
def query_source(ctx: Context, found: Found) -> list[Finding]:
    if not ctx.present("queries") or found.at("queries"):
        return []
    source = ctx.v.sources.get("queries")
    if source not in (None, "queries"):
        return [QUERY_SOURCE("queries", "source", matrix=PROJECTIONS[source])]
    if ctx.compare("queries", found) and ctx.differs("queries"):
        origin = "not from a projection" if source is None else "from W_query"
        return [QUERY_SOURCE("queries", "values", origin=origin)]
    return []


@finds(KEY_INDEX)
def key_index(ctx: Context, found: Found) -> list[Finding]:
    if not ctx.present("keys") or found.at("keys"):
        return []
    source = ctx.v.sources.get("keys")
    if source not in (None, "keys"):
        return [KEY_INDEX("keys", "source", matrix=PROJECTIONS[source])]
    if not (ctx.compare("keys", found) and ctx.differs("keys")):
        return []
    keys = ctx.v.stages["keys"]
    for shift in (1, -1):  # keys[i] == reference keys[i + shift]  <=>  roll(keys, shift) == reference keys
        if not ctx.differs("keys", torch.roll(keys, shifts=shift, dims=-2)):
            return [KEY_INDEX("keys", "shifted", shift=shift)]
    return [KEY_INDEX("keys", "values")]


@finds(VALUE_PATH)
def value_path(ctx: Context, found: Found) -> list[Finding]:
    if not ctx.present("values") or found.at("values", "weights_applied"):
        return []
    source = ctx.v.sources.get("values")
    wrong_source = source if source not in (None, "values") else None
    origin = f" (they come from {PROJECTIONS[wrong_source]})" if wrong_source is not None else ""
    weights_match = ctx.compare("weights", found) and not ctx.differs("weights")
    if weights_match and ctx.compare("context", found) and ctx.differs("context"):
        return [VALUE_PATH("values", "context", origin=origin)]
    if wrong_source is not None:
        return [VALUE_PATH("values", "source", matrix=PROJECTIONS[wrong_source])]
    return []
