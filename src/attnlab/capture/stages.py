"""The pipeline's stages, in the order the source computes them, and their named axes.

Declared once, read everywhere (as TransformerLens declares its hook shapes). Every consumer —
diagnostics, findings, the record, the sinks — works on the canonical view below; the record and
the terminal also show each stage in the module's own rank (SelfAttention_v1's weights (6, 6),
CausalAttention's (2, 6, 6), MultiHeadAttention's (2, 2, 6, 6)).

Pipeline order matters: `first_divergent_stage` and the diagnosis walk the stages in this order,
because a wrong early stage makes every later one wrong.
"""

from __future__ import annotations

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
