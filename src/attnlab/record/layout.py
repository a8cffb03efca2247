"""record.json's layout against the nested record, today's and older: the one place the file's shape
differs from the dataclasses' (attnlab.record.codec walks those).

Format 3 (today's) is flat. A side's field `x` is written as `x` for the variant and `reference_x`
for the reference, its name as `variant` / `reference`, and its stages, shapes and canonical shapes
together as `stages` / `reference_stages`: {stage: {"shape", "values", "canonical_axes",
"canonical_shape"}}. Stage values above `INLINE_LIMIT` elements are stored as `null`: record.json
stays small at 4096 tokens.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import fields
from typing import Any, get_type_hints

import numpy as np

from attnlab.capture.stages import AXES
from attnlab.record.model import Effect, ModelInfo, Side, canonical_shape

INLINE_LIMIT = 65_536
FORMAT_VERSION = 3  # 3: values in the module's own rank; 2: values in the canonical view (view_shape); 1: 2-D stages

PREFIX = {"variant": "", "reference": "reference_"}  # a side's keys, by the record field holding it
IN_STAGES = ("shapes", "canonical_shapes")  # written inside each stage's entry
# where format 3 has a side's keys: before this record field (a side's name: at the side's own place)
BEFORE = {"stages": "expected_shapes", "reference_stages": "expected_shapes", "diagnostics": "head_diagnostics",
          "reference_diagnostics": "first_divergent_stage"}
OMITTED_WHEN_EMPTY = ("origin",)
SPARSE = (ModelInfo,)  # written with its unset fields left out, and as {} for none
UNSET_LEFT_OUT = (ModelInfo, Effect)  # written without their fields that are None (an effect's batch_items)
_EFFECT_SINCE = {"kl_clamped": 0.0, "non_finite_positions": 0}  # an effect written before these had neither
_SIDE_TYPES = get_type_hints(Side)

Coder = Callable[[Any, Any], Any]  # (value, type) -> value: codec.encode, codec.decode


def side_types(role: str) -> dict[str, Any]:
    """The top-level keys a side is written under, each with its field's type."""
    return {_key(role, f.name): _SIDE_TYPES[f.name] for f in fields(Side) if f.name not in IN_STAGES}


def side_to_json(role: str, side: Side, encode: Coder) -> dict[str, Any]:
    return {_key(role, f.name): _stages_to_json(side) if f.name == "stages"
            else encode(getattr(side, f.name), _SIDE_TYPES[f.name])
            for f in fields(Side) if f.name not in IN_STAGES}


def flat(sides: dict[str, dict[str, Any]], written: dict[str, Any], order: list[str]) -> dict[str, Any]:
    """Format 3's object: the record's fields in `order` with the sides' keys at their places."""
    pending = {key: value for side in sides.values() for key, value in side.items()}
    out: dict[str, Any] = {"format_version": FORMAT_VERSION}
    for name in order:
        out.update({key: pending.pop(key) for key in [k for k in pending if BEFORE.get(k) == name]})
        if name in sides:
            out[name] = pending.pop(name)
        elif name not in OMITTED_WHEN_EMPTY or written[name]:
            out[name] = written[name]
    return {**out, **pending}


def side_from_json(role: str, data: dict[str, Any], decode: Coder) -> Side:
    stages, shapes, views = _stages_from_json(data.get(_key(role, "stages")) or {}, int(data["format_version"]))
    rest = {f.name: decode(data[_key(role, f.name)], _SIDE_TYPES[f.name]) for f in fields(Side)
            if f.name not in ("name", "stages", *IN_STAGES) and data.get(_key(role, f.name)) is not None}
    return Side(name=str(data.get(role) or role), stages=stages, shapes=shapes, canonical_shapes=views, **rest)


def as_current(data: dict[str, Any]) -> dict[str, Any]:
    """An older format's object as today's (a copy): format 1's output was its context, and an
    effect written before rounding was clamped and non-finite positions counted had neither."""
    data = {**data, "format_version": int(data.get("format_version", 1))}
    model = data.get("model")
    if isinstance(model, dict):
        data["model"] = {k: {**_EFFECT_SINCE, **v} if k in ("effect", "end_to_end") and isinstance(v, dict) else v
                         for k, v in model.items()}
    if data["format_version"] >= 2:
        return data
    data.setdefault("output_is_context", True)
    for role in PREFIX:
        entries = data.get(_key(role, "stages")) or {}
        if "context" in entries:
            data[_key(role, "stages")] = {**entries, "output": entries["context"]}
    diagnostics = dict(data.get("diagnostics") or {})
    if "divergence_context" in diagnostics:  # format 1 had no output stage: it was the context
        for prefix in ("divergence", "relative_divergence", "non_finite", "shape_ok"):
            diagnostics.setdefault(f"{prefix}_output", diagnostics.get(f"{prefix}_context"))
        data["diagnostics"] = diagnostics
    return data


def _key(role: str, name: str) -> str:
    return role if name == "name" else f"{PREFIX[role]}{name}"


def _stages_to_json(side: Side) -> dict[str, Any]:
    out = {}
    for name, shape in side.shapes.items():
        values, view = side.stages.get(name), side.canonical(name)
        inline = values.reshape(shape) if values is not None and values.size <= INLINE_LIMIT else None
        out[name] = {"shape": list(shape),
                     "values": _nested(inline) if inline is not None else None,
                     "canonical_axes": list(AXES.get(name, ())),
                     "canonical_shape": list(view.shape) if view is not None else None}
    return out


def _stages_from_json(data: dict[str, Any], version: int) -> tuple[dict[str, np.ndarray | None], dict[str, list[int]],
                                                                   dict[str, list[int]]]:
    """Values in the module's own rank, their shapes, and the canonical view's shapes. Format 2
    nested the values in the canonical view (`view_shape`); format 1 had 2-D stages only."""
    stages, shapes, views = {}, {}, {}
    for name, entry in data.items():
        shapes[name] = list(entry["shape"])
        view = entry.get("canonical_shape") if version >= 3 else entry.get("view_shape")
        views[name] = list(view) if view is not None else list(canonical_shape(name, tuple(shapes[name])))
        values = entry.get("values")
        array = None if values is None else np.asarray(_map_nested(values, float), dtype=np.float32)
        if array is not None and version < 3:
            array = array.reshape(shapes[name])
        if array is not None and list(array.shape) != shapes[name]:
            raise ValueError(f"stage {name}: values of shape {list(array.shape)} where its shape is {shapes[name]}")
        stages[name] = array
    return stages, shapes, views


def _nested(values: np.ndarray) -> list[Any]:
    as_list: list[Any] = values.astype(np.float64).tolist()
    if np.isfinite(values).all():
        return as_list
    nested: list[Any] = _map_nested(as_list, json_number)
    return nested


def json_number(value: float) -> float | str:
    """NaN and infinity as the strings "nan", "inf", "-inf": standard JSON has no literal for them."""
    value = float(value)
    return value if math.isfinite(value) else str(value)


def _map_nested(values: Any, fn: Callable[[Any], Any]) -> Any:
    if isinstance(values, list):
        return [_map_nested(v, fn) for v in values]
    return fn(values)
