"""What a parameter is, judged by its name, and the seed every module is built after.

The one list of the names attnlab reads a module's parameters by: the query, key and value
projections, a fused query-key-value projection and an output projection. The registry (choosing
the reference), the layouts (moving weights) and the capture (following products) all ask here.
Moving the reference's parameters into a variant of any layout is attnlab.modules.layouts' job.
"""

from __future__ import annotations

import re

import torch
from torch import nn

QKV_ROLES = ("queries", "keys", "values")  # also a fused projection's column blocks, in this order
_ROLE_PATTERNS: dict[str, re.Pattern[str]] = {
    "queries": re.compile(r"query|queries|(^|_)w?q($|_)|^wq$|q_?proj"),
    "keys": re.compile(r"key|(^|_)w?k($|_)|^wk$|k_?proj"),
    "values": re.compile(r"value|(^|_)w?v($|_)|^wv$|v_?proj"),
}
# a fused query-key-value projection: the source's later chapters' qkv, GPT-2's c_attn,
# nn.MultiheadAttention's in_proj, GPT-NeoX's query_key_value
FUSED_QKV = re.compile(r"qkv|c_attn|in_proj|query_key_value")
# ...of which those that hold each head's query, key and value side by side, (heads, 3, head_dim)
# along the output, when every head has its own key and value: GPT-NeoX, Persimmon, Bloom, Falcon
PER_HEAD_FUSED_QKV = re.compile(r"query_key_value")
# an output projection, lower case: the source's out_proj, Hugging Face's o_proj, dense and
# DistilBERT's out_lin, nanoGPT's c_proj, the bonus class's proj, diffusers' to_out, and the
# spellings of hand-written classes
OUTPUT_PROJECTIONS = frozenset({"out_proj", "o_proj", "c_proj", "proj", "out", "out_lin", "wo", "w_o", "w_out",
                                "output_proj", "to_out", "dense"})


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


def parameter_role(name: str) -> str | None:
    """"queries" | "keys" | "values" | "qkv" (fused) | "out" | None, judged by the parameter's name.

    `heads.1.W_query.weight` -> "queries", `attn.c_attn.weight` -> "qkv",
    `self_attn.in_proj_bias` -> "qkv", `o_proj.weight` -> "out", `to_out.0.weight` -> "out".
    """
    parts = [p for p in name.lower().split(".") if not p.isdigit()]
    if len(parts) > 1 and parts[-1] in ("weight", "bias"):
        parts = parts[:-1]
    leaf = parts[-1] if parts else ""
    if FUSED_QKV.search(leaf):
        return "qkv"
    if leaf in OUTPUT_PROJECTIONS:
        return "out"
    return projection_role(leaf)


def is_norm(owner: nn.Module) -> bool:
    """A normalisation module (LayerNorm, RMSNorm, Qwen3's and Gemma's q_norm/k_norm classes): its
    parameters are a per-channel gain and shift, never a projection, whatever the module is named."""
    return isinstance(owner, (nn.LayerNorm, nn.RMSNorm, nn.GroupNorm)) or type(owner).__name__.endswith("Norm")


def module_roles(module: nn.Module) -> dict[str, str | None]:
    """Each parameter's `parameter_role`, decided by its owner first: a norm module's weight
    (`q_norm.weight`, 1-D like a bias) has none."""
    roles = {}
    for prefix, owner in module.named_modules():
        for attr, _ in owner.named_parameters(recurse=False):
            name = f"{prefix}.{attr}" if prefix else attr
            roles.setdefault(name, None if is_norm(owner) else parameter_role(name))
    return roles


def fused_width(param: torch.Tensor) -> int:
    """The axis a fused projection's three blocks lie along: a bias's length; a weight's output
    axis, (3 * d, d_in) as nn.Linear stores it or (d_in, 3 * d) as GPT-2's Conv1D does."""
    return param.shape[0] if param.dim() == 1 or param.shape[0] > param.shape[-1] else param.shape[-1]


def manual_seed(seed: int) -> None:
    """`torch.manual_seed(seed)` for a run on the CPU, which is where attnlab computes.

    The CPU generator is the only one a CPU draw reads, so the values are the source's. The full
    call also queues the seed for every accelerator backend not yet initialised (CUDA, XPU,
    MTIA), formatting a stack trace for each, three calls a seed: a visible share of a book-size
    job's compute.
    """
    torch.default_generator.manual_seed(seed)
