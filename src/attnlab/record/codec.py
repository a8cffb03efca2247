"""A record as a JSON object and back, older formats read as today's.

JSON has no NaN or infinity: they are spelled as strings, so the file stays standard JSON. Stage
values above `INLINE_LIMIT` elements are stored as `null`: record.json stays small at 4096 tokens.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import asdict, fields
from pathlib import Path
from typing import Any

import numpy as np

from attnlab.capture.stages import AXES
from attnlab.record.model import Effect, Finding, ModelInfo, Prediction, Record, canonical_shape

INLINE_LIMIT = 65_536
FORMAT_VERSION = 3  # 3: values in the module's own rank; 2: values in the canonical view (view_shape); 1: 2-D stages


def to_json_dict(record: Record) -> dict[str, Any]:
    return {
        "format_version": FORMAT_VERSION,
        "variant": record.variant,
        "seed": record.seed,
        "config": record.config,
        "n_tokens": record.n_tokens,
        "d_in": record.d_in,
        "d_out": record.d_out,
        "status": record.status,
        "error": record.error,
        "labels": record.labels,
        "reference": record.reference,
        **({"origin": record.origin} if record.origin else {}),
        "stages": _stages_to_json(record, reference=False),
        "reference_stages": _stages_to_json(record, reference=True),
        "expected_shapes": record.expected_shapes,
        "missing_stages": record.missing_stages,
        "reconstructed_stages": record.reconstructed_stages,
        "output_is_context": record.output_is_context,
        "returned": record.returned,
        "output_element": record.output_element,
        "returned_weights": record.returned_weights,
        "diagnostics": {k: _json_number(v) for k, v in record.diagnostics.items()},
        "head_diagnostics": {k: [_json_number(x) for x in v] for k, v in record.head_diagnostics.items()},
        "reference_diagnostics": {k: _json_number(v) for k, v in record.reference_diagnostics.items()},
        "first_divergent_stage": record.first_divergent_stage,
        "findings": [asdict(f) for f in record.findings],
        "not_checked": record.not_checked,
        "predictions": [asdict(p) for p in record.predictions],
        "weights_loaded": record.weights_loaded,
        "device": record.device,
        "dtype": record.dtype,
        "profile": {k: _json_number(v) for k, v in record.profile.items()},
        "model": _model_to_json(record.model),
    }


def from_json_dict(data: dict[str, Any], path: Path | None = None) -> Record:
    version = int(data.get("format_version", 1))
    stages, shapes, views = _stages_from_json(data.get("stages") or {}, version)
    ref_stages, ref_shapes, ref_views = _stages_from_json(data.get("reference_stages") or {}, version)
    old = version < 2
    if old:  # the output was the context
        for found, found_shapes in ((stages, shapes), (ref_stages, ref_shapes)):
            if "context" in found_shapes:
                found["output"], found_shapes["output"] = found.get("context"), found_shapes["context"]
    return Record(
        variant=str(data["variant"]),
        seed=int(data["seed"]),
        config=data.get("config") or {},
        n_tokens=int(data.get("n_tokens", 0)),
        d_in=int(data.get("d_in", 0)),
        d_out=int(data.get("d_out", 0)),
        status=data["status"],
        error=data.get("error"),
        labels=list(data.get("labels") or []),
        reference=str(data.get("reference") or "reference"),
        origin=str(data.get("origin") or ""),
        stages=stages,
        reference_stages=ref_stages,
        stage_shapes=shapes,
        reference_stage_shapes=ref_shapes,
        canonical_shapes=views,
        reference_canonical_shapes=ref_views,
        expected_shapes=data.get("expected_shapes") or {},
        missing_stages=list(data.get("missing_stages") or []),
        reconstructed_stages=list(data.get("reconstructed_stages") or []),
        output_is_context=bool(data.get("output_is_context", old)),
        returned=str(data.get("returned") or ""),
        output_element=data.get("output_element"),
        returned_weights=data.get("returned_weights"),
        diagnostics=_v1_diagnostics(data.get("diagnostics") or {}, old),
        head_diagnostics={k: [_from_json_number(x) for x in v] for k, v in (data.get("head_diagnostics") or {}).items()},
        reference_diagnostics={k: _from_json_number(v) for k, v in (data.get("reference_diagnostics") or {}).items()},
        first_divergent_stage=data.get("first_divergent_stage"),
        findings=[Finding(**_known(Finding, f)) for f in data.get("findings") or []],
        not_checked=list(data.get("not_checked") or []),
        predictions=[Prediction(**_known(Prediction, p)) for p in data.get("predictions") or []],
        weights_loaded=data.get("weights_loaded") or {},
        device=str(data.get("device") or "cpu"),
        dtype=str(data.get("dtype") or "float32"),
        profile={k: _from_json_number(v) for k, v in (data.get("profile") or {}).items()},
        model=_model_from_json(data.get("model") or {}),
        path=path,
    )


def _known(cls: type, data: dict[str, Any]) -> dict[str, Any]:
    """The fields of `cls` in `data`: a newer attnlab's extra key is named by `unread_keys`, not an error."""
    names = {f.name for f in fields(cls)}
    return {k: v for k, v in data.items() if k in names}


def unread_keys(data: dict[str, Any]) -> list[str]:
    """The keys of a record's JSON this version does not read (written by a newer attnlab), as
    `key`, `findings[].key`, `predictions[].key`, `model.key`."""
    top = {f.name for f in fields(Record)} | {"format_version"}
    unread = [key for key in data if key not in top]
    for name, cls in (("findings", Finding), ("predictions", Prediction)):
        names = {f.name for f in fields(cls)}
        found = {k for item in data.get(name) or [] if isinstance(item, dict) for k in item if k not in names}
        unread += [f"{name}[].{key}" for key in sorted(found)]
    model = data.get("model")
    model_keys = model if isinstance(model, dict) else {}
    unread += [f"model.{key}" for key in model_keys if key not in {f.name for f in fields(ModelInfo)}]
    return unread


def _model_to_json(model: ModelInfo | None) -> dict[str, Any]:
    """The fields that are set, an effect as an object of numbers; `{}` for a run outside a model."""
    if model is None:
        return {}
    out = {}
    for name in _MODEL_ORDER:
        value = getattr(model, name)
        if isinstance(value, Effect):
            value = _effect_to_json(value)
        if value is not None:
            out[name] = value
    return out


# the order the keys were written in when `model` was a dict: a record's bytes stay as they were
_MODEL_ORDER = ("model", "reference_model", "n_layers", "parameters", "tokenizer", "heads", "kv_heads", "end_to_end",
                "layer", "attention", "stack", "replaced", "positions", "reference_attention", "effect")


def _model_from_json(data: dict[str, Any]) -> ModelInfo | None:
    if not data:
        return None
    known = {f.name for f in fields(ModelInfo)}
    values = {k: v for k, v in data.items() if k in known}
    for name in ("effect", "end_to_end"):
        if values.get(name) is not None:
            values[name] = _effect_from_json(values[name])
    return ModelInfo(**values)


def _effect_to_json(effect: Effect) -> dict[str, Any]:
    """Its numbers, then each batch item's effect where there are several."""
    out: dict[str, Any] = {k: _json_number(v) if isinstance(v, float) else v for k, v in effect.items()}
    if effect.batch_items is not None:
        out["batch_items"] = [_effect_to_json(item) for item in effect.batch_items]
    return out


def _effect_from_json(data: dict[str, Any]) -> Effect:
    """An effect written before rounding was clamped and non-finite positions counted had neither."""
    known = {f.name for f in fields(Effect)} - {"batch_items"}
    values = {"kl_clamped": 0.0, "non_finite_positions": 0, **data}
    read: dict[str, Any] = {k: float(v) if isinstance(v, str) else v for k, v in values.items() if k in known}
    items = data.get("batch_items")
    return Effect(**read, batch_items=[_effect_from_json(item) for item in items] if items is not None else None)


def _stages_to_json(record: Record, *, reference: bool) -> dict[str, Any]:
    shapes = record.reference_stage_shapes if reference else record.stage_shapes
    out = {}
    for name, shape in shapes.items():
        values = (record.reference_stages if reference else record.stages).get(name)
        view = record.canonical(name, reference=reference)
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


def _v1_diagnostics(data: dict[str, Any], old: bool) -> dict[str, float | None]:
    diagnostics = {k: _from_json_number(v) for k, v in data.items()}
    if old and "divergence_context" in diagnostics:  # format 1 had no output stage: it was the context
        for prefix in ("divergence", "relative_divergence", "non_finite", "shape_ok"):
            diagnostics.setdefault(f"{prefix}_output", diagnostics.get(f"{prefix}_context"))
    return diagnostics


def _json_number(value: float | None) -> float | str | None:
    """NaN and infinity as the strings "nan", "inf", "-inf": standard JSON has no literal for them."""
    if value is None:
        return None
    value = float(value)
    return value if math.isfinite(value) else str(value)


def _from_json_number(value: Any) -> float | None:
    return None if value is None else float(value)


def _nested(values: np.ndarray) -> list[Any]:
    as_list: list[Any] = values.astype(np.float64).tolist()
    if np.isfinite(values).all():
        return as_list
    nested: list[Any] = _map_nested(as_list, _json_number)
    return nested


def _map_nested(values: Any, fn: Callable[[Any], Any]) -> Any:
    if isinstance(values, list):
        return [_map_nested(v, fn) for v in values]
    return fn(values)
