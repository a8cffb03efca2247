"""Which projection a parameter is, by its name, and the seed every module is built after.

Moving the reference's parameters into a variant of any layout is attnlab.modules.layouts' job.
"""

from __future__ import annotations

import re

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


def is_norm(owner: nn.Module) -> bool:
    """A normalisation module (LayerNorm, RMSNorm, Qwen3's and Gemma's q_norm/k_norm classes): its
    parameters are a per-channel gain and shift, never a projection, whatever the module is named."""
    return isinstance(owner, (nn.LayerNorm, nn.RMSNorm, nn.GroupNorm)) or type(owner).__name__.endswith("Norm")


def parameter_owners(module: nn.Module) -> dict[str, nn.Module]:
    """Each parameter's dotted name -> the module that holds it."""
    return {f"{prefix}.{name}" if prefix else name: owner
            for prefix, owner in module.named_modules() for name, _ in owner.named_parameters(recurse=False)}


def manual_seed(seed: int) -> None:
    """`torch.manual_seed(seed)` for a run on the CPU, which is where attnlab computes.

    The CPU generator is the only one a CPU draw reads, so the values are the source's. The full
    call also queues the seed for every accelerator backend not yet initialised (CUDA, XPU,
    MTIA), formatting a stack trace for each, three calls a seed: a visible share of a book-size
    job's compute.
    """
    torch.default_generator.manual_seed(seed)
