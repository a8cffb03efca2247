"""An output gate: the context multiplied by sigmoid of a gate before the output projection, the
gate a projection's own columns (Qwen3-Next's q_proj holds each head's query and gate side by side)."""

from __future__ import annotations

from attnlab.diagnosis.context import Pair
from attnlab.diagnosis.finding_code import Code, finds
from attnlab.diagnosis.recognisers.recogniser import recogniser
from attnlab.record import Finding

_MATRIX = {"queries": "W_query (q_proj)", "keys": "W_key (k_proj)", "values": "W_value (v_proj)"}


OUTPUT_GATE = Code(
    "output_gate", ("output",), "info",
    "the context multiplied by a gate from a projection's own columns before the output projection (Qwen3-Next)",
    "an output gate: the context is multiplied by a gate computed from columns of {where} beside the ones it uses "
    "(each head's query and its gate side by side, as Qwen3-Next does) before the output projection; deliberate, so "
    "the output differs from the reference's while the context matches.",
    "an output gate (Qwen3-Next): the context multiplied by a gate from a projection's own columns before the output "
    "projection; a `q_proj` twice the queries' width holding each head's query and gate side by side gets the "
    "reference's queries in each head's query half, its gate kept",
    ("tests/diagnosis/test_declared_changes.py::test_a_gate_inside_q_proj_is_loaded_and_named",), "deliberate")


@finds(OUTPUT_GATE)
@recogniser
def output_gate(p: Pair) -> list[Finding]:
    if p.v.output_gate is None or p.ref.output_gate is not None or p.changed("context"):
        return []
    where = _MATRIX.get(p.v.output_gate, p.v.output_gate)
    return [OUTPUT_GATE("output", where=where)]
