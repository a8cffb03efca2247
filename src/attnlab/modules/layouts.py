"""A module's attention parameters in one canonical form, and moving them into any layout.

With `weights=shared` the variant computes with the reference's parameters, whatever either
module's layout: raw `nn.Parameter`s used as `x @ W` (SelfAttention_v1), `nn.Linear` (stored
(d_out, d_in)), a fused qkv `nn.Linear(d_in, 3 * d_out)` split by position, `nn.MultiheadAttention`,
an `nn.ModuleList` of per-head modules, q_proj/k_proj/v_proj/o_proj, fewer key/value heads.

Everything goes through `Projections`, in `x @ W` orientation with head h in columns
[h * head_dim:(h + 1) * head_dim]. Only parameters are touched, never buffers: a variant's causal
mask is part of what is being compared, and a wholesale `state_dict` load would overwrite it.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import torch
from torch import Tensor, nn

from attnlab.errors import UserError
from attnlab.modules.roles import QKV_ROLES, declared_count, fused_layout, manual_seed, module_roles, unit_kernel

# nn.MultiheadAttention's add_bias_kv parameters are an extra key/value token, not projection biases.
_MHA_EXTRA_TOKEN = ("bias_k", "bias_v")
_MHA_LINEAR_STYLE = ("in_proj_weight", "q_proj_weight", "k_proj_weight", "v_proj_weight")


class LayoutError(UserError):
    """A module whose attention parameters cannot be identified (or split) for shared weights."""


@dataclass
class Projections:
    """A module's attention parameters in one canonical form, x @ W orientation."""

    W_query: Tensor  # (d_in, num_heads * head_dim), head h = columns [h*hd:(h+1)*hd]
    W_key: Tensor  # (d_in, num_kv_heads * head_dim)
    W_value: Tensor  # (d_in, num_kv_heads * head_dim)
    b_query: Tensor | None = None  # (num_heads * head_dim,)
    b_key: Tensor | None = None  # (num_kv_heads * head_dim,)
    b_value: Tensor | None = None  # (num_kv_heads * head_dim,)
    W_out: Tensor | None = None  # (num_heads * head_dim, width), None if the module has none
    b_out: Tensor | None = None  # (width,)
    num_heads: int = 1
    num_kv_heads: int = 1

    @property
    def head_dim(self) -> int:
        return self.W_query.shape[-1] // self.num_heads

    def weight(self, role: str) -> Tensor | None:
        return self.W_out if role == "out" else self.qkv_weight(role)

    def qkv_weight(self, role: str) -> Tensor:
        """The queries', keys' or values' weight: never missing, unlike the output projection's."""
        return {"queries": self.W_query, "keys": self.W_key, "values": self.W_value}[role]

    def bias(self, role: str) -> Tensor | None:
        return {"queries": self.b_query, "keys": self.b_key, "values": self.b_value, "out": self.b_out}[role]


_WEIGHT_FIELD = {"queries": "W_query", "keys": "W_key", "values": "W_value", "out": "W_out"}
_BIAS_FIELD = {"queries": "b_query", "keys": "b_key", "values": "b_value", "out": "b_out"}


@dataclass(frozen=True)
class _Slot:
    """One parameter with a role, and how it is stored."""

    name: str
    param: nn.Parameter
    role: str  # a parameter_role
    kind: str  # "weight" | "bias"
    head: int | None  # its index in an nn.ModuleList of per-head modules
    linear_style: bool  # stored (out, in) and used as x @ W.T (nn.Linear, nn.MultiheadAttention, a kernel-1 conv)
    form: str = "matrix"  # "matrix" | "unit_kernel" (a kernel-1 conv's (out, in, 1[, 1])) | "per_head" (width, heads, hd)
    groups: int = 1  # a grouped kernel-1 conv's: its (in, out) matrix is block diagonal, one block a group

    @property
    def parts(self) -> tuple[str, ...]:
        return QKV_ROLES if self.role == "qkv" else (self.role,)

    def canonical(self) -> Tensor:
        """The parameter as a matrix in x @ W orientation (a bias as is)."""
        value = self.param.detach().clone()
        if self.form == "unit_kernel":  # a kernel-1 convolution is a linear map of each position
            value = torch.block_diag(*value.flatten(1).chunk(self.groups))  # (out, in), each group its own block
        elif self.form == "per_head":  # XLNet's einsum "ibh,hnd->ibnd": (width, heads * hd), head h in its own columns
            value = value.flatten(1)
            return value.T if self.role == "out" else value  # its output's "ibnd,hnd->ibh" maps heads back to the width
        return value.T if self.linear_style else value

    def stored(self, target: Tensor) -> Tensor:
        """A canonical `target` as this parameter stores it (the inverse of `canonical`)."""
        if self.form == "per_head":
            return (target.T if self.role == "out" else target).reshape(self.param.shape)
        stored = target.T if self.linear_style else target
        if self.form != "unit_kernel":
            return stored
        rows, cols = (n // self.groups for n in stored.shape)
        blocks = [stored[g * rows:(g + 1) * rows, g * cols:(g + 1) * cols] for g in range(self.groups)]
        return torch.cat(blocks).reshape(self.param.shape)  # (out, in / groups, 1...)


def _owner(module: nn.Module, name: str) -> tuple[nn.Module, str]:
    prefix, _, attr = name.rpartition(".")
    return (module.get_submodule(prefix) if prefix else module), attr


def _head_index(module: nn.Module, name: str) -> int | None:
    parts = name.split(".")
    head = None
    for i in range(1, len(parts)):
        if parts[i].isdigit() and isinstance(module.get_submodule(".".join(parts[:i])), nn.ModuleList):
            head = int(parts[i])
    return head


def _slots(module: nn.Module) -> list[_Slot]:
    slots = []
    roles = module_roles(module)
    for name, param in module.named_parameters():
        role = roles.get(name)
        owner, attr = _owner(module, name)
        if role is None or (isinstance(owner, nn.MultiheadAttention) and attr in _MHA_EXTRA_TOKEN):
            continue
        kind = "bias" if param.dim() == 1 else "weight"
        form = _form(owner, attr, param, role) if kind == "weight" else "matrix"
        linear_style = kind == "weight" and (
            (isinstance(owner, nn.Linear) and attr == "weight")
            or (isinstance(owner, nn.MultiheadAttention) and attr in _MHA_LINEAR_STYLE)
            or form == "unit_kernel"
        )
        groups = owner.groups if form == "unit_kernel" and isinstance(owner, (nn.Conv1d, nn.Conv2d)) else 1
        slots.append(_Slot(name, param, role, kind, _head_index(module, name), linear_style, form, groups))
    return slots


def _form(owner: nn.Module, attr: str, param: nn.Parameter, role: str) -> str:
    """How a weight is stored: a matrix, a kernel-1 convolution's, or a bare (width, heads, head_dim)
    parameter used through an einsum (XLNet's q, k, v and o) when the module keeps that head count."""
    if attr == "weight" and unit_kernel(owner):
        return "unit_kernel"
    heads = declared_count(owner, "num_heads")
    if param.dim() == 3 and role != "qkv" and heads is not None and param.shape[1] == heads and attr != "weight":
        return "per_head"
    return "matrix"


def _describe(module: nn.Module) -> str:
    shown = [f"{name} {tuple(p.shape)}" for name, p in module.named_parameters()]
    listed = ", ".join(shown[:8]) + (f", ... ({len(shown) - 8} more)" if len(shown) > 8 else "")
    return listed or "none"


def _no_layout(module: nn.Module, why: str) -> LayoutError:
    return LayoutError(
        f"{type(module).__name__}: {why} (parameters: {_describe(module)}); name them W_query/W_key/W_value, "
        f"q_proj/k_proj/v_proj or a fused qkv, or run with weights=native"
    )


def _split_fused(module: nn.Module, slot: _Slot, fused: Tensor, num_heads: int,
                 num_kv_heads: int | None) -> list[Tensor]:
    """Queries, keys, values by position along the last axis, as `fused_layout` lays them out."""
    layout = fused_layout(module, slot.name, num_heads, num_kv_heads)
    if layout.head_dim(fused.shape[-1]) is None:
        heads = f"{layout.num_heads} query and {layout.num_kv_heads} key/value heads"
        raise _no_layout(module, f"a fused qkv of width {fused.shape[-1]} does not split into {heads}")
    return layout.split(fused)


def _combine(module: nn.Module, role: str, pieces: list[tuple[int | None, Tensor]]) -> Tensor:
    """One tensor per role: a single parameter, or per-head ones concatenated in head order."""
    if len(pieces) == 1 and pieces[0][0] is None:
        return pieces[0][1]
    numbered = [(head, t) for head, t in pieces if head is not None]
    if len(numbered) < len(pieces) or sorted(head for head, _ in numbered) != list(range(len(numbered))):
        raise _no_layout(module, f"several {role} parameters that are not one per head")
    return torch.cat([t for _, t in sorted(numbered, key=lambda piece: piece[0])], dim=-1)


def _out_groups(slots: list[_Slot]) -> list[list[_Slot]]:
    """Output-projection parameters grouped by their module, in registration order (the order
    of application in every layout seen: nn.MultiheadAttention's out_proj, then a wrapper's proj)."""
    groups: dict[str, list[_Slot]] = {}
    for slot in slots:
        if slot.role == "out":
            groups.setdefault(slot.name.rpartition(".")[0], []).append(slot)
    return list(groups.values())


def output_width(module: nn.Module) -> int | None:
    """The width the module's output projection returns (its last one's, of several in a row), None without one."""
    groups = _out_groups(_slots(module))
    weights = [s for s in groups[-1] if s.kind == "weight"] if groups else []
    return weights[0].canonical().shape[-1] if weights else None


def _compose_out(module: nn.Module, slots: list[_Slot]) -> dict[tuple[str, str], Tensor]:
    """One output projection: several in a row compose, (c @ W1 + b1) @ W2 + b2."""
    groups = _out_groups(slots)
    if not groups:
        return {}
    layers = []
    for group in groups:
        weight = next((s.canonical() for s in group if s.kind == "weight"), None)  # (width_in, width)
        bias = next((s.canonical() for s in group if s.kind == "bias"), None)  # (width,)
        if weight is None:
            raise _no_layout(module, f"an output-projection bias {group[0].name} without a weight")
        layers.append((weight, bias))
    W_out, b_out = layers[0]
    for weight, bias in layers[1:]:
        W_out = W_out @ weight
        b_out = bias if b_out is None else (b_out @ weight if bias is None else b_out @ weight + bias)
    return {("out", "weight"): W_out} | ({("out", "bias"): b_out} if b_out is not None else {})


def read_projections(module: nn.Module, *, num_heads: int, num_kv_heads: int | None = None) -> Projections:
    """The module's query/key/value (and output) parameters as `Projections` (copies).

    A raw 2-D parameter is read as used in `x @ W`; num_kv_heads=None infers it from the widths.
    """
    slots = _slots(module)
    pieces: dict[tuple[str, str], list[tuple[int | None, Tensor]]] = {}
    for slot in slots:
        values = slot.canonical()
        if slot.role == "out":
            continue  # composed below: there may be several in a row
        if values.dim() > 2:
            raise _no_layout(module, f"{slot.name} is a {slot.param.dim()}-D projection, not a layout attnlab reads")
        if slot.role == "qkv":
            for role, part in zip(QKV_ROLES, _split_fused(module, slot, values, num_heads, num_kv_heads)):
                pieces.setdefault((role, slot.kind), []).append((slot.head, part))
        else:
            pieces.setdefault((slot.role, slot.kind), []).append((slot.head, values))
    if not all((role, "weight") in pieces for role in QKV_ROLES):
        raise _no_layout(module, "no identifiable query/key/value parameters")
    found = {key: _combine(module, key[0], value) for key, value in pieces.items()}
    found |= _compose_out(module, slots)
    W_query = found["queries", "weight"]  # (d_in, num_heads * head_dim)
    if W_query.shape[-1] % num_heads:
        raise _no_layout(module, f"queries of width {W_query.shape[-1]} do not split into num_heads={num_heads} heads")
    head_dim = W_query.shape[-1] // num_heads
    kv_heads = num_kv_heads if num_kv_heads is not None else max(1, found["keys", "weight"].shape[-1] // head_dim)
    fields = {_WEIGHT_FIELD[role]: t for (role, kind), t in found.items() if kind == "weight"}
    fields |= {_BIAS_FIELD[role]: t for (role, kind), t in found.items() if kind == "bias"}
    return Projections(**fields, num_heads=num_heads, num_kv_heads=kv_heads)


def _kv_columns(projections: Projections, num_kv_heads: int) -> list[int]:
    """For each of num_kv_heads new key/value heads, the source kv head: the one serving query
    head g * group (group = num_heads // num_kv_heads)."""
    group = projections.num_heads // num_kv_heads
    source_group = projections.num_heads // projections.num_kv_heads
    return [(g * group) // source_group for g in range(num_kv_heads)]


def with_kv_heads(projections: Projections, num_kv_heads: int) -> Projections:
    """The same projections with num_kv_heads key/value heads: kv head g takes the columns of the
    kv head that serves query head g * group (fewer heads select, more heads repeat)."""
    if num_kv_heads == projections.num_kv_heads:
        return projections
    if num_kv_heads < 1 or projections.num_heads % num_kv_heads:
        raise LayoutError(f"num_kv_heads={num_kv_heads} does not divide num_heads={projections.num_heads}")
    hd = projections.head_dim
    columns = torch.cat([torch.arange(h * hd, (h + 1) * hd) for h in _kv_columns(projections, num_kv_heads)])

    def pick(t: Tensor) -> Tensor:
        return t[..., columns]  # (..., num_kv_heads * head_dim)

    return replace(
        projections,
        W_key=pick(projections.W_key),  # (d_in, num_kv_heads * head_dim)
        W_value=pick(projections.W_value),  # (d_in, num_kv_heads * head_dim)
        b_key=None if projections.b_key is None else pick(projections.b_key),  # a missing bias stays missing
        b_value=None if projections.b_value is None else pick(projections.b_value),
        num_kv_heads=num_kv_heads,
    )


def _role_target(projections: Projections, slot: _Slot) -> Tensor | None:
    return projections.weight(slot.role) if slot.kind == "weight" else projections.bias(slot.role)


def _target(module: nn.Module, projections: Projections, slot: _Slot,
            heads_per_role: dict[str, int]) -> tuple[Tensor | None, str]:
    """What this parameter should hold, canonical orientation, and a note on where it came from."""
    if slot.role == "qkv":
        parts = [_role_target(projections, replace(slot, role=role)) for role in QKV_ROLES]
        if all(part is None for part in parts):
            return None, ""
        widths = [projections.qkv_weight(role).shape[-1] for role in QKV_ROLES]
        filled = [torch.zeros(w) if part is None else part for part, w in zip(parts, widths)]
        axis = "entries" if slot.kind == "bias" else "rows" if slot.linear_style else "columns"
        layout = fused_layout(module, slot.name, projections.num_heads, projections.num_kv_heads)
        if layout.order == "per_head":
            return layout.join(filled), f"fused qkv, {axis} per head: queries, keys, values"
        if layout.order == "grouped":
            return layout.join(filled), f"fused qkv, {axis} in {layout.groups} groups of {', '.join(layout.blocks)}"
        bounds = [0, widths[0], widths[0] + widths[1], sum(widths)]
        spans = ", ".join(f"{a}:{b} = {role}" for a, b, role in zip(bounds, bounds[1:], QKV_ROLES))
        return torch.cat(filled, dim=-1), f"fused qkv, {axis} {spans}"
    full = _role_target(projections, slot)
    if full is not None and slot.role == "queries" and slot.head is None and _gated(slot, full):
        return _beside_gates(slot, full, projections.num_heads), "each head's query beside its output gate (kept)"
    if full is None or slot.head is None:
        return full, ""
    width = full.shape[-1] // heads_per_role[slot.role]
    start = slot.head * width
    return full[..., start : start + width], f"head {slot.head} = columns {start}:{start + width}"


def _gated(slot: _Slot, queries: Tensor) -> bool:
    """A query projection twice as wide as the queries along its output, the same along its input."""
    own = slot.canonical().shape
    return own[:-1] == queries.shape[:-1] and own[-1] == 2 * queries.shape[-1]


def _beside_gates(slot: _Slot, queries: Tensor, num_heads: int) -> Tensor:
    """A q_proj twice the queries' width holding each head's query and its output gate side by side
    (Qwen3-Next): the reference's queries in each head's first half, the module's own gate in the second."""
    both: Tensor = slot.canonical().unflatten(-1, (num_heads, 2, -1))  # (..., nh, query | gate, hs)
    both[..., 0, :] = queries.unflatten(-1, (num_heads, -1))
    return both.flatten(-3)


def _later_outs(slots: list[_Slot]) -> set[str]:
    """Several output projections in a row take the reference's as: the weight in the first,
    the bias in the first that has one (the ones after it are identity), the rest neutral."""
    groups = _out_groups(slots)
    weights = [s.name for group in groups[1:] for s in group if s.kind == "weight"]
    biases = [s.name for group in groups for s in group if s.kind == "bias"]
    return set(weights) | set(biases[1:])


def _neutral(slot: _Slot, why: str) -> str:
    """Zero bias or identity weight, so the parameter passes its input through unchanged."""
    param = slot.param
    if slot.kind == "bias":
        param.zero_()
        return f"zeroed ({why})"
    own = slot.canonical()  # (in, out)
    if own.dim() == 2 and own.shape[0] == own.shape[1]:
        param.copy_(slot.stored(torch.eye(own.shape[0], dtype=param.dtype)))
        return f"identity ({why})"
    return f"native: {why}, not square"


def _copy(slot: _Slot, target: Tensor, note: str) -> str:
    param = slot.param
    if slot.form != "matrix" and slot.kind == "weight":
        if target.shape != slot.canonical().shape:
            return f"native: shape {tuple(param.shape)} does not fit {tuple(target.shape)}"
        param.copy_(slot.stored(target))
        how = "kernel-1 convolution" if slot.form == "unit_kernel" else "per head (width, heads, head_dim)"
        return f"shared ({', '.join([how, *([note] if note else [])])})"
    stored = target.T if slot.linear_style else target
    notes = (["transposed"] if slot.linear_style else []) + ([note] if note else [])
    if param.shape != stored.shape and not slot.linear_style and param.dim() == 2 and param.shape == stored.T.shape:
        stored, notes = stored.T, ["transposed"] + notes  # a raw (d_out, d_in) used as x @ W.T
    if param.dim() == 3 and param.shape[1:] == target.T.shape:  # one (out, in) weight per position (Moshi's codebooks)
        param.copy_(target.T.expand_as(param))  # (positions, out, in)
        return f"shared (transposed, the same in each of its {param.shape[0]} per-position weights)"
    if param.shape != stored.shape:
        return f"native: shape {tuple(param.shape)} does not fit {tuple(stored.shape)}"
    param.copy_(stored)
    return f"shared ({', '.join(notes)})" if notes else "shared"


def load_projections(
    module: nn.Module, projections: Projections, *, num_heads: int, num_kv_heads: int | None = None
) -> dict[str, str]:
    """Copy `projections` into the module's parameters; returns {parameter name: how it was loaded}.

    Formats: "shared", "shared (transposed)", "shared (transposed, fused qkv, rows 0:2 = queries,
    2:4 = keys, 4:6 = values)", "shared (transposed, head 1 = columns 2:4)", "zeroed (the reference
    has no bias)", "identity (the reference has no output projection)", "native: shape (3, 3) does
    not fit (3, 2)". A recognised parameter that does not fit keeps its own values: a d_in-sized
    projection is a bug the diagnosis should see. num_kv_heads=None: the projections' own. It is
    never guessed from the module's key width, which a d_in-sized key projection would fake.
    """
    slots = _slots(module)
    if not any(slot.role in (*QKV_ROLES, "qkv") for slot in slots):
        raise _no_layout(module, "no identifiable query/key/value parameters")
    projections = replace(projections, num_heads=num_heads)
    projections = with_kv_heads(projections, projections.num_kv_heads if num_kv_heads is None else num_kv_heads)
    heads_per_role: dict[str, int] = {}
    for slot in slots:
        if slot.head is not None and slot.kind == "weight":
            heads_per_role[slot.role] = heads_per_role.get(slot.role, 0) + 1
    later_outs = _later_outs(slots)
    report: dict[str, str] = {}
    with torch.no_grad():
        for slot in slots:
            if slot.name in later_outs:
                report[slot.name] = _neutral(slot, "an output projection after the first")
                continue
            target, note = _target(module, projections, slot, heads_per_role)
            if target is None:  # only an output projection or a bias can be absent from the projections
                what = "bias" if slot.kind == "bias" else "output projection"
                report[slot.name] = _neutral(slot, f"the reference has no {what}")
            else:
                report[slot.name] = _copy(slot, target, note)
    for name in _extra_tokens(module):
        report[name] = "native: nn.MultiheadAttention's add_bias_kv token, an extra key/value, not a projection bias"
    return report


def _extra_tokens(module: nn.Module) -> list[str]:
    return [
        name for name, _ in module.named_parameters()
        if isinstance(_owner(module, name)[0], nn.MultiheadAttention) and _owner(module, name)[1] in _MHA_EXTRA_TOKEN
    ]


def _fit_reference(projections: Projections, covered: set[tuple[str, str]],
                   grouped: dict[str, int]) -> tuple[Projections, dict[tuple[str, str], str]]:
    """Zero what the variant has no place for (its biases, the entries a grouped projection's block
    diagonal lacks), identity for a missing output projection; returns the changed projections and
    {part: why} for the record."""
    changed: dict[str, Any] = {}  # field name -> tensor: replace() checks a ** dict against every field, the int head counts too
    why: dict[tuple[str, str], str] = {}  # (role, "weight" | "bias")
    for role, groups in grouped.items():
        weight = projections.weight(role)  # (d_in, d_out)
        if weight is not None and all(n % groups == 0 for n in weight.shape):
            blocks = torch.block_diag(*[torch.ones(*(n // groups for n in weight.shape))] * groups)  # (d_in, d_out)
            changed[_WEIGHT_FIELD[role]] = weight * blocks
            why[role, "weight"] = f"its {groups} diagonal blocks kept (the variant's projection is in {groups} groups)"
    for role in (*QKV_ROLES, "out"):
        bias = projections.bias(role)
        if bias is not None and (role, "bias") not in covered:
            changed[_BIAS_FIELD[role]] = torch.zeros_like(bias)
            why[role, "bias"] = "zeroed (the variant has no bias)"
    W_out = projections.W_out
    if W_out is not None and ("out", "weight") not in covered:
        if W_out.shape[0] == W_out.shape[1]:
            changed["W_out"] = torch.eye(W_out.shape[0], dtype=W_out.dtype)
            why["out", "weight"] = "identity (the variant has no output projection)"
        else:
            why["out", "weight"] = "kept: the variant has no output projection and this one is not square"
    return replace(projections, **changed), why


def align(
    reference: nn.Module, variant: nn.Module, *, num_heads: int, num_kv_heads: int | None = None
) -> dict[str, str]:
    """Read the reference and load it into the variant, so that they differ only in computation.

    What the variant cannot hold is neutralised in the reference for this run (a bias zeroed, an
    output projection set to identity) and reported under "reference.<parameter>"; the rest of the
    report is `load_projections`'. A variant with fewer key/value heads (GQA, MQA) takes the
    reference's first head of each group and the reference keeps all of its own, so that what the
    grouping changes shows per head: the heads that lost their own keys diverge.
    """
    projections = read_projections(reference, num_heads=num_heads)
    load_qkv = getattr(variant, "load_qkv", None)
    if callable(load_qkv):  # a plugin with a layout of its own loads the matrices itself
        with torch.no_grad():
            load_qkv(projections.W_query, projections.W_key, projections.W_value)
        return {"load_qkv": "plugin loader"}
    variant_slots = _slots(variant)
    covered = {(role, slot.kind) for slot in variant_slots for role in slot.parts}
    grouped = {slot.role: slot.groups for slot in variant_slots if slot.groups > 1 and slot.role != "qkv"}
    fitted, why = _fit_reference(projections, covered, grouped)
    kv_heads = projections.num_kv_heads if num_kv_heads is None else num_kv_heads
    report: dict[str, str] = {}
    if why:
        load_projections(reference, fitted, num_heads=num_heads, num_kv_heads=projections.num_kv_heads)
        for slot in _slots(reference):
            reasons = sorted({why[part, slot.kind] for part in slot.parts if (part, slot.kind) in why})
            if reasons:
                report[f"reference.{slot.name}"] = "; ".join(reasons)
    report |= load_projections(variant, fitted, num_heads=num_heads, num_kv_heads=kv_heads)
    if kv_heads < projections.num_kv_heads:  # the reference keeps its own: the grouping's effect stays visible
        kept = _kv_columns(projections, kv_heads)
        report["key/value heads"] = (f"the reference's heads {', '.join(map(str, kept))} of {projections.num_kv_heads} "
                                     f"(the first of each group of {projections.num_heads // kv_heads})")
    return report


def seed_projections(
    reference: nn.Module, seed: int, init: str, *, num_heads: int = 1, num_kv_heads: int | None = None
) -> dict[str, str]:
    """`init="normal"`: redraw the reference's query/key/value weights as torch.randn(d_in, cols) /
    sqrt(d_in), in the order query, key, value, right after seeding. `init="rand"`: the reference
    keeps its own initialisation (built under the seed, for SelfAttention_v1 that is the source's
    three torch.rand draws); returns {} then."""
    if init != "normal":
        return {}
    projections = read_projections(reference, num_heads=num_heads, num_kv_heads=num_kv_heads)
    d_in = projections.W_query.shape[0]
    manual_seed(seed)
    draws = {
        field: torch.randn(d_in, projections.qkv_weight(role).shape[-1]) / d_in**0.5  # (d_in, cols)
        for role, field in zip(QKV_ROLES, ("W_query", "W_key", "W_value"))
    }
    return load_projections(
        reference, replace(projections, **draws), num_heads=num_heads, num_kv_heads=projections.num_kv_heads
    )
