"""What a parameter is, judged by its name, and the seed every module is built after.

The one list of the names attnlab reads a module's parameters by: the query, key and value
projections, a fused query-key-value projection and an output projection. The registry (choosing
the reference), the layouts (moving weights) and the capture (following products) all ask here.
Moving the reference's parameters into a variant of any layout is attnlab.modules.layouts' job.
"""

from __future__ import annotations

import ast
import inspect
import re
import textwrap
from dataclasses import dataclass

import torch
from torch import nn

from attnlab.modules.class_cache import per_class
from attnlab.modules.families import FAMILIES, family_of, spellings

QKV_ROLES = ("queries", "keys", "values")  # also a fused projection's column blocks, in this order
_ROLE_PATTERNS: dict[str, re.Pattern[str]] = {
    "queries": re.compile(r"query|queries|(^|_)w?q($|_)|^wq$|q_?proj"),
    "keys": re.compile(r"key|(^|_)w?k($|_)|^wk$|k_?proj"),
    "values": re.compile(r"value|(^|_)w?v($|_)|^wv$|v_?proj"),
}
# a fused query-key-value projection: the source's later chapters' qkv, and every family adapter's
# (GPT-2's c_attn, nn.MultiheadAttention's in_proj, GPT-NeoX's and Falcon's query_key_value)
FUSED_QKV = re.compile("|".join(sorted({"qkv", *(re.escape(row.fused_qkv.lower()) for row in FAMILIES
                                                  if row.fused_qkv)})))
# ...of which those that hold each head's query, key and value side by side, (heads, 3, head_dim)
# along the output, when every head has its own key and value: GPT-NeoX, Persimmon, Bloom (a
# family row's fused_order says so for the others: Falcon, GPTBigCode)
PER_HEAD_FUSED_QKV = re.compile(r"query_key_value")
_WRAPPED = ("linear",)  # the inner layer of a projection wrapper (Moshi's and Kyutai's q_proj.linear), named by its kind
_HEAD_SPLIT = "transpose_for_scores"  # BERT-style classes' (b, T, heads * hd) -> (b, heads, T, hd)
# an output projection, lower case: the source's out_proj, Hugging Face's o_proj, dense and
# DistilBERT's out_lin, nanoGPT's c_proj, the bonus class's proj, diffusers' to_out, T5's o, BLIP's projection,
# InternVL's projection_layer, Pix2Struct's and Kosmos-2.5's output, and the spellings of hand-written classes
# (and every family adapter's own)
OUTPUT_PROJECTIONS = frozenset({"out_proj", "o_proj", "c_proj", "proj", "out", "out_lin", "wo", "w_o", "w_out",
                                "output_proj", "to_out", "dense", "o", "projection", "projection_layer", "output",
                                *(row.out_proj.lower() for row in FAMILIES if row.out_proj)})


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
    if len(parts) > 1 and parts[-1] in _WRAPPED:  # Moshi's q_proj.linear: the wrapper's name says the role
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


def unit_kernel(owner: nn.Module) -> bool:
    """A convolution of kernel size 1 (SqueezeBERT's, Vocos' q/k/v): a linear map of each position; of several
    groups, a block-diagonal one."""
    return (isinstance(owner, (nn.Conv1d, nn.Conv2d)) and all(k == 1 for k in owner.kernel_size)
            and all(s == 1 for s in owner.stride))


def module_roles(module: nn.Module) -> dict[str, str | None]:
    """Each parameter's `parameter_role`, decided by its owner first: a norm module's weight
    (`q_norm.weight`, 1-D like a bias) has none."""
    roles: dict[str, str | None] = {}
    shapes: dict[str, tuple[int, ...]] = {}
    for prefix, owner in module.named_modules():
        for attr, parameter in owner.named_parameters(recurse=False):
            name = f"{prefix}.{attr}" if prefix else attr
            roles.setdefault(name, None if is_norm(owner) else parameter_role(name))
            shapes[name] = tuple(parameter.shape)
    roles = _outermost_out(roles)
    return roles if any(r in (*QKV_ROLES, "qkv") for r in roles.values()) else _fused_by_shape(roles, shapes)


def _outermost_out(roles: dict[str, str | None]) -> dict[str, str | None]:
    """A bare parameter named like an output projection inside a part of the class (Inkling's
    rel_logits_proj.proj, a bank of relative-position profiles) is not the output projection when the
    class has an output projection module (its o_proj.weight); output projections in a row still are."""
    def bare_inside(name: str) -> bool:
        parts = [p for p in name.split(".") if not p.isdigit()]
        return len(parts) > 1 and parts[-1] not in ("weight", "bias")

    if not any(r == "out" and not bare_inside(n) for n, r in roles.items()):
        return roles
    return {n: None if r == "out" and bare_inside(n) else r for n, r in roles.items()}


def _fused_by_shape(roles: dict[str, str | None], shapes: dict[str, tuple[int, ...]]) -> dict[str, str | None]:
    """Where no name says queries, keys or values: the one unnamed nn.Linear weight three times as wide
    as its input (Bark's att_proj, (3 * d, d)) is a fused query-key-value projection, its bias too."""
    fused = [n.removesuffix(".weight") for n, r in roles.items() if r is None and n.endswith("weight")
             and len(shapes[n]) == 2 and shapes[n][0] == 3 * shapes[n][1]]
    if len(fused) != 1:
        return roles
    return {n: "qkv" if n in (f"{fused[0]}.weight", f"{fused[0]}.bias") else r for n, r in roles.items()}


def declared_count(module: nn.Module, key: str) -> int | None:
    """The count the module keeps as an attribute under any spelling of attnlab's `key`
    ("num_heads", "num_kv_heads"): GPTBigCode's `kv_heads`, Falcon's `num_kv_heads`."""
    found = (getattr(module, spelling, None) for spelling in spellings(key))
    return next((v for v in found if isinstance(v, int) and not isinstance(v, bool)), None)


def module_heads(module: nn.Module, width: int) -> int | None:
    """The query heads a module keeps: a count under a usual spelling, else its `width` over the head
    size it keeps (MaskFormer's DETR attention's head_dim), else an nn.MultiheadAttention's inside it
    (BridgeTower's vision tower); None where it keeps none."""
    head_dim = declared_count(module, "head_dim")
    inner = next((m.num_heads for m in module.modules() if isinstance(m, nn.MultiheadAttention)), None)
    return declared_count(module, "num_heads") or (width // head_dim if head_dim else None) or inner


@dataclass(frozen=True)
class FusedLayout:
    """Where a fused projection keeps queries, keys and values along its output: `"qkv"` blocks
    [num_heads | num_kv_heads | num_kv_heads] heads, or `"per_head"` (num_kv_heads, group + 2, head_dim):
    each key/value head's group of queries, then its key and value ((num_heads, 3, head_dim) with one per head)."""

    order: str
    num_heads: int
    num_kv_heads: int
    # "grouped": the output in `groups` equal groups, each [block | block | block] in the order `blocks`
    # names the roles (CodeGen's mp_num = 4 groups of query, value, key)
    groups: int = 1
    blocks: tuple[str, ...] = QKV_ROLES

    def head_dim(self, width: int) -> int | None:
        """The head size a fused output of `width` columns has, None if it does not split."""
        heads = self.num_heads + 2 * self.num_kv_heads
        return None if width % heads else width // heads

    def split(self, fused: torch.Tensor) -> list[torch.Tensor]:
        """Queries, keys and values of a fused tensor, along its last axis."""
        if self.order == "grouped":
            by_group = fused.unflatten(-1, (self.groups, 3, -1))  # (..., groups, 3, local_dim)
            return [by_group[..., self.blocks.index(role), :].flatten(-2) for role in QKV_ROLES]  # each (..., d_out)
        hd = self.head_dim(fused.shape[-1])
        if hd is None:  # layouts._split_fused checks first, naming the module
            raise ValueError(f"a fused width of {fused.shape[-1]} does not split into {self.num_heads} query "
                             f"and {self.num_kv_heads} key/value heads")
        if self.order == "per_head":  # each key/value head's group: its queries, its key, its value
            group = self.num_heads // self.num_kv_heads
            by_kv = fused.unflatten(-1, (self.num_kv_heads, group + 2, hd))  # (..., n_kv, group + 2, hd)
            return [by_kv[..., :group, :].flatten(-3), by_kv[..., group, :].flatten(-2),
                    by_kv[..., group + 1, :].flatten(-2)]  # (..., nh * hd), (..., n_kv * hd) twice
        return list(fused.split([self.num_heads * hd, self.num_kv_heads * hd, self.num_kv_heads * hd], dim=-1))

    def join(self, parts: list[torch.Tensor]) -> torch.Tensor:
        """The fused tensor of queries, keys and values (the inverse of `split`)."""
        if self.order == "grouped":
            by_role = [parts[QKV_ROLES.index(role)].unflatten(-1, (self.groups, -1)) for role in self.blocks]
            return torch.stack(by_role, dim=-2).flatten(-3)  # (..., groups * 3 * local_dim)
        if self.order == "per_head":
            queries = parts[0].unflatten(-1, (self.num_kv_heads, -1, parts[1].shape[-1] // self.num_kv_heads))
            kv = [part.unflatten(-1, (self.num_kv_heads, 1, -1)) for part in parts[1:]]  # each (..., n_kv, 1, hd)
            return torch.cat([queries, *kv], dim=-2).flatten(-3)  # (..., n_kv * (group + 2) * hd)
        return torch.cat(parts, dim=-1)

    def column_roles(self, width: int) -> torch.Tensor | None:
        """Each output column's index in QKV_ROLES, (width,). A width these heads do not split is read
        as equal thirds (one head's own fused projection under a wrapper that declares the head
        count); None if that does not split either."""
        if self.head_dim(width) is None:
            thirds = FusedLayout("qkv", 1, 1)
            return None if self == thirds else thirds.column_roles(width)
        widths = [part.shape[-1] for part in self.split(torch.zeros(width))]
        return self.join([torch.full((w,), role) for role, w in enumerate(widths)])


def fused_layout(module: nn.Module, name: str, num_heads: int | None = None,
                 num_kv_heads: int | None = None) -> FusedLayout:
    """How the module's fused projection `name` is laid out. The head counts are those given, else
    the module's attributes (equal thirds when it keeps none); the order is the family row's for the
    projection it names, else read off the name. Per head only when every head has its own key and
    value: with fewer, Falcon and GPTBigCode keep [q | k | v] blocks."""
    heads = num_heads or declared_count(module, "num_heads") or 1
    kv = num_kv_heads or declared_count(module, "num_kv_heads") or heads
    row = family_of(module)
    leaf = name.removesuffix(".weight").removesuffix(".bias").rpartition(".")[2]
    by_name = "per_head" if PER_HEAD_FUSED_QKV.search(name.lower()) else "qkv"
    named = row.fused_order if row.fused_qkv == leaf else by_name
    if named == "per_head" and getattr(module, "new_decoder_architecture", False):
        return FusedLayout("per_head", heads, kv)  # Falcon's: each key/value head's queries, key and value together
    groups, unpacked = declared_count(module, "fused_groups") or 1, unpacked_order(type(module))
    blocks, by_head = unpacked or (QKV_ROLES, False)
    if kv == heads and by_head:
        return FusedLayout("per_head", heads, kv)
    if kv == heads and named == "qkv" and (groups > 1 or blocks != QKV_ROLES):
        return FusedLayout("grouped", heads, kv, groups, blocks)
    return FusedLayout(named if kv == heads else "qkv", heads, kv)


@per_class
def unpacked_order(cls: type[nn.Module]) -> tuple[tuple[str, ...], bool] | None:
    """The roles in the order the class's forward unpacks a split of its fused projection into
    three names (CodeGen's `query, value, key = qkv.split(local_dim, dim=-1)`), read off its source,
    and whether it splits each head's columns (DeBERTa's `transpose_for_scores(qp).chunk(3, dim=-1)`)."""
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(cls.forward)))
    except (TypeError, OSError, SyntaxError, AttributeError):
        return None
    for node in ast.walk(tree):
        if (isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Tuple) and isinstance(node.value, ast.Call)
                and getattr(node.value.func, "attr", None) in ("split", "chunk", "unbind")):
            roles = tuple(projection_role(e.id) if isinstance(e, ast.Name) else None for e in node.targets[0].elts)
            if sorted(r for r in roles if r) == sorted(QKV_ROLES) and len(roles) == 3:
                receiver = getattr(node.value.func, "value", None)
                by_head = isinstance(receiver, ast.Call) and getattr(receiver.func, "attr", None) == _HEAD_SPLIT
                return tuple(r for r in roles if r), bool(by_head)  # all three named, checked above
    return None


def manual_seed(seed: int) -> None:
    """`torch.manual_seed(seed)` for a run on the CPU, which is where attnlab computes.

    The CPU generator is the only one a CPU draw reads, so the values are the source's. The full
    call also queues the seed for every accelerator backend not yet initialised (CUDA, XPU,
    MTIA), formatting a stack trace for each, three calls a seed: a visible share of a book-size
    job's compute.
    """
    torch.default_generator.manual_seed(seed)
