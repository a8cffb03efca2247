"""The classic mistakes of loading GPT-2's weights into the source's GPTModel, read from the parameters.

Both layers' parameters are read in one canonical form (attnlab.modules.layouts: `x @ W`, GPT-2's
fused Conv1D `c_attn` split into queries, keys and values by position), so a learner's layer is
compared with the reference layer role by role: a projection that holds another role's columns
(query, key and value taken from `c_attn` in the wrong order), one that holds its own transposed
(a Conv1D weight, stored (in, out), copied into an nn.Linear without `.T`), and a bias that is
absent or not the reference's (left out). Each is reported at the stage it first changes; the codes
are declared in attnlab.diagnosis.codes.MODEL_CODES.
"""

from __future__ import annotations

import torch
from torch import Tensor

from attnlab.modules.layouts import QKV_ROLES, Projections
from attnlab.record import Finding

STAGE = {"queries": "queries", "keys": "keys", "values": "values", "out": "output"}
TOLERANCE = 1e-6


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
            findings.append(Finding("qkv_order", STAGE[role], "error",
                                    f"the {role} projection holds the reference's {swapped} weights: "
                                    f"GPT-2's c_attn is [query | key | value] along its last axis; split it in that order "
                                    f"(np.split(c_attn_w, 3, axis=-1) gives q, k, v)"))
        elif weight is not None and weight.shape == expected.T.shape and _same(weight, expected.T):
            what = "c_proj" if role == "out" else "c_attn"
            findings.append(Finding("not_transposed", STAGE[role], "error",
                                    f"the {role} weight is the reference's transposed: GPT-2's {what} is a "
                                    f"Conv1D stored (in, out), an nn.Linear stores (out, in); copy it with .T"))
    return findings


def _bias_finding(learner: Projections, reference: Projections, role: str) -> list[Finding]:
    bias, expected = learner.bias(role), reference.bias(role)
    if expected is None or not bool(expected.abs().max() > TOLERANCE) or _same(bias, expected):
        return []
    swapped = next((other for other in QKV_ROLES if other != role and _same(bias, reference.bias(other))), None)
    if swapped is not None:
        return [Finding("qkv_order", STAGE[role], "error",
                        f"the {role} bias is the reference's {swapped} bias: split c_attn's bias in the "
                        f"order query, key, value")]
    how = "has no bias (build it with qkv_bias=True)" if bias is None else "has a bias that is not the reference's (load it)"
    return [Finding("bias_missing", STAGE[role], "error",
                    f"the {role} projection {how}: GPT-2's projections all have biases")]
