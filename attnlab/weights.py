"""Seeded W_query/W_key/W_value, and loading them into any variant.

The source's protocol is `torch.manual_seed(seed)` then three `torch.rand(d_in, d_out)` draws in
the order query, key, value. With `weights=shared` every module of a run gets these three
matrices, so differences between variants come only from the variant's change.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import torch
from torch import nn

_ROLE_PATTERNS: dict[str, re.Pattern[str]] = {
    "queries": re.compile(r"query|queries|(^|_)w?q($|_)|^wq$|q_?proj"),
    "keys": re.compile(r"key|(^|_)w?k($|_)|^wk$|k_?proj"),
    "values": re.compile(r"value|(^|_)w?v($|_)|^wv$|v_?proj"),
}


def projection_role(param_name: str) -> str | None:
    """The stage a parameter projects into ("queries", "keys", "values"), judged by its name.

    Projections are identified by the parameter they use, never by call order: the source
    computes keys before queries. `W_query`, `W_query.weight`, `q_proj.weight`, `Wq` -> "queries".
    """
    parts = param_name.lower().split(".")
    if parts[-1] in ("weight", "bias") and len(parts) > 1:
        parts = parts[:-1]
    leaf = parts[-1]
    matches = [role for role, pattern in _ROLE_PATTERNS.items() if pattern.search(leaf)]
    return matches[0] if len(matches) == 1 else None


@dataclass(frozen=True)
class QKVWeights:
    W_query: torch.Tensor  # (d_in, d_out)
    W_key: torch.Tensor  # (d_in, d_out)
    W_value: torch.Tensor  # (d_in, d_out)

    def for_role(self, role: str) -> torch.Tensor:
        return {"queries": self.W_query, "keys": self.W_key, "values": self.W_value}[role]


def manual_seed(seed: int) -> None:
    """`torch.manual_seed(seed)` for a run on the CPU, which is where attnlab computes.

    The CPU generator is the only one a CPU draw reads, so the values are the source's. The full
    call also queues the seed for every accelerator backend not yet initialised (CUDA, XPU,
    MTIA), formatting a stack trace for each, three calls a seed: a visible share of a book-size
    job's compute.
    """
    torch.default_generator.manual_seed(seed)


def seeded_qkv(seed: int, d_in: int, d_out: int, init: str = "rand") -> QKVWeights:
    """`init="rand"` is the source's protocol. `init="normal"` draws torch.randn / sqrt(d_in) in the
    same order: zero-mean projections, the setting in which q.k has variance ~ d_k and dividing by
    sqrt(d_k) keeps the softmax input at unit scale for any d_k (see experiment=dk_scaling)."""
    manual_seed(seed)
    if init == "normal":
        draw = lambda: torch.randn(d_in, d_out) / d_in**0.5  # noqa: E731
    else:
        draw = lambda: torch.rand(d_in, d_out)  # noqa: E731
    W_query = draw()
    W_key = draw()
    W_value = draw()
    return QKVWeights(W_query, W_key, W_value)


def load_shared(module: nn.Module, qkv: QKVWeights) -> dict[str, str]:
    """Copy the shared matrices into `module`; returns {parameter: how it was loaded}.

    A raw `nn.Parameter` of shape (d_in, d_out) takes the matrix as is; an `nn.Linear.weight`
    (d_out, d_in) takes it transposed. A parameter whose shape fits neither keeps the values it
    was built with (after the same seed), and the returned report says so: a d_in-sized
    projection is a bug the diagnosis should see, not one the loader should hide.
    A plugin with its own layout defines `load_qkv(W_query, W_key, W_value)`.
    """
    if hasattr(module, "load_qkv"):
        module.load_qkv(qkv.W_query, qkv.W_key, qkv.W_value)
        return {"load_qkv": "plugin loader"}
    report: dict[str, str] = {}
    linear_weights = {f"{name}.weight" for name, sub in module.named_modules() if isinstance(sub, nn.Linear) and name}
    with torch.no_grad():
        for name, param in module.named_parameters():
            role = projection_role(name)
            if role is None or name.endswith("bias"):
                continue
            transposed = name in linear_weights  # nn.Linear stores (d_out, d_in), even when square
            matrix = qkv.for_role(role).T if transposed else qkv.for_role(role)
            if param.shape == matrix.shape:
                param.copy_(matrix)
                report[name] = "shared (transposed)" if transposed else "shared"
            elif param.shape == matrix.T.shape:  # a raw (d_out, d_in) parameter, used as x @ W.T
                param.copy_(matrix.T)
                report[name] = "shared (transposed)"
            else:
                report[name] = f"native: shape {tuple(param.shape)} does not fit {tuple(matrix.shape)}"
    return report
