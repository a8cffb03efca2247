"""The classic mistakes of loading GPT-2's weights into the source's GPTModel, read from the parameters.

Both layers' parameters are read in one canonical form (attnlab.modules.layouts: `x @ W`, GPT-2's
fused Conv1D `c_attn` split into queries, keys and values by position), so a learner's layer is
compared with the reference layer role by role: a projection that holds another role's columns
(query, key and value taken from `c_attn` in the wrong order), one that holds its own transposed
(a Conv1D weight, stored (in, out), copied into an nn.Linear without `.T`), and a bias that is
absent or not the reference's (left out). Each is reported at the stage it first changes; its code
is declared here (attnlab.model.finding_codes collects a model run's codes).
"""

from __future__ import annotations

import torch
from torch import Tensor

from attnlab.diagnosis.finding_code import MODEL_TABLE, Code
from attnlab.modules.layouts import Projections
from attnlab.modules.roles import QKV_ROLES
from attnlab.record import Finding

STAGE = {"queries": "queries", "keys": "keys", "values": "values", "out": "output"}
TOLERANCE = 1e-6
_SHOWN_BY = ("tests/model/test_layer_check.py::test_each_loading_mistake_is_found_at_its_layer_and_stage",)

QKV_ORDER = Code(
    "qkv_order", tuple(STAGE.values()), "error",
    "a projection holds another role's columns of the fused c_attn: q, k, v split in the wrong order",
    {"weight": "the {role} projection holds the reference's {swapped} weights: GPT-2's c_attn is [query | key | value] "
               "along its last axis; split it in that order (np.split(c_attn_w, 3, axis=-1) gives q, k, v)",
     "bias": "the {role} bias is the reference's {swapped} bias: split c_attn's bias in the order query, key, value"},
    "a learner's projection holds the reference's weights (or bias) of another role: GPT-2's fused `c_attn` split "
    "into query, key and value in the wrong order", _SHOWN_BY, MODEL_TABLE)
NOT_TRANSPOSED = Code(
    "not_transposed", tuple(STAGE.values()), "error",
    "a Conv1D weight (stored (in, out)) copied into an nn.Linear (stored (out, in)) without .T",
    "the {role} weight is the reference's transposed: GPT-2's {what} is a Conv1D stored (in, out), an nn.Linear "
    "stores (out, in); copy it with .T",
    "a learner's weight is the reference's transposed: GPT-2's `Conv1D` stores (in, out), `nn.Linear` (out, in)",
    _SHOWN_BY, MODEL_TABLE)
BIAS_MISSING = Code(
    "bias_missing", tuple(STAGE.values()), "error",
    "a projection without the reference's bias: left out (qkv_bias=False) or not loaded",
    "the {role} projection {how}: GPT-2's projections all have biases",
    "a learner's projection has no bias, or one that is not the reference's, where GPT-2's has one", _SHOWN_BY,
    MODEL_TABLE)
CODES = (QKV_ORDER, NOT_TRANSPOSED, BIAS_MISSING)


def _same(a: Tensor | None, b: Tensor | None) -> bool:
    return a is not None and b is not None and a.shape == b.shape and torch.allclose(a, b, atol=TOLERANCE, rtol=0)


def loading_findings(learner: Projections, reference: Projections) -> list[Finding]:
    """The loading mistakes of one layer, each at the stage of the projection it is in."""
    findings = []
    for role in (*QKV_ROLES, "out"):
        weight, expected = learner.weight(role), reference.weight(role)
        if expected is None or _same(weight, expected):
            findings += _bias_finding(learner, reference, role)
            continue
        swapped = next((other for other in QKV_ROLES if other != role and _same(weight, reference.weight(other))), None)
        if swapped is not None:
            findings.append(QKV_ORDER(STAGE[role], "weight", role=role, swapped=swapped))
        elif weight is not None and weight.shape == expected.T.shape and _same(weight, expected.T):
            what = "c_proj" if role == "out" else "c_attn"
            findings.append(NOT_TRANSPOSED(STAGE[role], role=role, what=what))
    return findings


def _bias_finding(learner: Projections, reference: Projections, role: str) -> list[Finding]:
    bias, expected = learner.bias(role), reference.bias(role)
    if expected is None or not bool(expected.abs().max() > TOLERANCE) or _same(bias, expected):
        return []
    swapped = next((other for other in QKV_ROLES if other != role and _same(bias, reference.bias(other))), None)
    if swapped is not None:
        return [QKV_ORDER(STAGE[role], "bias", role=role, swapped=swapped)]
    how = "has no bias (build it with qkv_bias=True)" if bias is None else "has a bias that is not the reference's (load it)"
    return [BIAS_MISSING(STAGE[role], role=role, how=how)]
