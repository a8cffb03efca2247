"""An output gate: the context multiplied by sigmoid of a gate before the output projection, the
gate a projection's own columns (Qwen3-Next's q_proj holds each head's query and gate side by side)."""

from __future__ import annotations

from attnlab.diagnosis.context import Pair, finding
from attnlab.diagnosis.recognisers.recogniser import recogniser
from attnlab.record import Finding

_MATRIX = {"queries": "W_query (q_proj)", "keys": "W_key (k_proj)", "values": "W_value (v_proj)"}


@recogniser
def output_gate(p: Pair) -> list[Finding]:
    if p.v.output_gate is None or p.ref.output_gate is not None or p.changed("context"):
        return []
    where = _MATRIX.get(p.v.output_gate, p.v.output_gate)
    return [finding("output_gate", "output", f"an output gate: the context is multiplied by a gate computed from "
                    f"columns of {where} beside the ones it uses (each head's query and its gate side by side, as "
                    f"Qwen3-Next does) before the output projection; deliberate, so the output differs from the "
                    f"reference's while the context matches.")]
