"""The record: everything one run found, the only thing sinks read.

A record is written as JSON (never pickle), atomically, before any sink runs, so that a sweep
table can always be rebuilt from the records on disk. Stage values above `INLINE_LIMIT`
elements are stored as `null`: record.json stays small at 4096 tokens.

Stages are kept in the module's own rank (`stages[name].shape == stage_shapes[name]`, the
JSON `values` nest as its `shape` says); `Record.canonical(name)` is the same values in the
canonical view of `attnlab.capture.stages.AXES` (batch, heads, ...), a reshape, never a copy.
"""

from __future__ import annotations

import json
import math
import os
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from attnlab.capture.stages import AXES

INLINE_LIMIT = 65_536
RECORD_FILE = "record.json"
FORMAT_VERSION = 3  # 3: values in the module's own rank; 2: values in the canonical view (view_shape); 1: 2-D stages


@dataclass
class Finding:
    code: str  # e.g. "scaling"
    stage: str  # e.g. "scaled_scores"
    severity: str  # "error" | "warning" | "info"
    message: str  # one sentence a learner understands
    heads: list[int] | None = None  # the heads it holds for; None: the module has no heads axis, or it is about the split/merge
    batch: list[int] | None = None  # the batch items it holds for; None: the module takes no batch


@dataclass
class Prediction:
    name: str  # e.g. "context_shape"
    expected: Any
    observed: Any
    passed: bool


@dataclass
class Record:
    variant: str
    seed: int
    config: dict[str, Any]
    n_tokens: int = 0
    d_in: int = 0
    d_out: int = 0
    status: str = "ok"  # "ok" | "failed"
    error: str | None = None
    labels: list[str] = field(default_factory=list)
    reference: str = "reference"  # the variant the run compared against
    origin: str = ""  # a notebook's object: its class's qualified name and file, or <notebook>
    stages: dict[str, np.ndarray | None] = field(default_factory=dict)  # in the module's own rank
    reference_stages: dict[str, np.ndarray | None] = field(default_factory=dict)
    stage_shapes: dict[str, list[int]] = field(default_factory=dict)  # in the module's own rank
    reference_stage_shapes: dict[str, list[int]] = field(default_factory=dict)
    canonical_shapes: dict[str, list[int]] = field(default_factory=dict)  # each stage in the view of stages.AXES
    reference_canonical_shapes: dict[str, list[int]] = field(default_factory=dict)
    expected_shapes: dict[str, list[int]] = field(default_factory=dict)  # predicted: the reference's
    missing_stages: list[str] = field(default_factory=list)  # not found in the variant: not checked
    reconstructed_stages: list[str] = field(default_factory=list)  # computed by attnlab from a kernel's inputs
    output_is_context: bool = False  # the module returned its context: output is an alias of context
    returned: str = ""  # what forward returned, e.g. "tuple(Tensor (2, 8, 64), Tensor (2, 4, 8, 8))"
    output_element: str | None = None  # which element of it is the output, e.g. "[0]"; None: the value itself
    returned_weights: str | None = None  # attention weights returned beside the output, against the captured ones
    diagnostics: dict[str, float] = field(default_factory=dict)
    head_diagnostics: dict[str, list[float]] = field(default_factory=dict)  # {name: one value per head}
    reference_diagnostics: dict[str, float] = field(default_factory=dict)
    first_divergent_stage: str | None = None
    findings: list[Finding] = field(default_factory=list)
    not_checked: list[str] = field(default_factory=list)  # checks that could not run, each in one sentence
    predictions: list[Prediction] = field(default_factory=list)
    weights_loaded: dict[str, str] = field(default_factory=dict)
    device: str = "cpu"  # where both modules ran
    dtype: str = "float32"  # the variant's (the reference's is config["reference_dtype"])
    profile: dict[str, float] = field(default_factory=dict)  # with profile=true: attnlab.compute.profile.COLUMNS and ratios
    model: dict[str, Any] = field(default_factory=dict)  # with model=: the model, the layer, the effect on its output
    path: Path | None = None  # where it was read from or written to; not serialised
    scratch: Any = None  # a temporary folder of spilled stages, removed with the record; not serialised

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    @property
    def num_heads(self) -> int:
        weights = self.canonical("weights")
        return int(weights.shape[1]) if weights is not None else 1

    def canonical(self, stage: str, *, reference: bool = False) -> np.ndarray | None:
        """A stage in the canonical view of `attnlab.capture.stages.AXES`, (batch, heads, ...):
        the module's own values reshaped (a 2-D module's weights (6, 6) as (1, 1, 6, 6))."""
        values = (self.reference_stages if reference else self.stages).get(stage)
        if values is None:
            return None
        shape = (self.reference_canonical_shapes if reference else self.canonical_shapes).get(stage)
        return values.reshape(shape if shape is not None else canonical_shape(stage, values.shape))

    def drop_stages(self) -> None:
        """Keep the reductions, let the stage values go (their shapes stay): a streamed seed."""
        self.stages = dict.fromkeys(self.stages)
        self.reference_stages = dict.fromkeys(self.reference_stages)
        self.scratch = None

    def keep_stages(self, names: tuple[str, ...]) -> None:
        """Keep only these stages' values (both modules'), on disk: a layer of a model after the
        first, whose head grid the sinks still draw."""
        self.stages = {k: v if k in names else None for k, v in self.stages.items()}
        self.reference_stages = {k: v if k in names else None for k, v in self.reference_stages.items()}
        self.spill_stages()

    def spill_stages(self) -> None:
        """Keep the stage values on disk, memory-mapped, instead of in memory (a streamed seed
        whose images the sinks still draw)."""
        from attnlab.capture.spill import spill_arrays

        if self.scratch is None:
            self.scratch = tempfile.TemporaryDirectory(prefix="attnlab-spill-")
        spill_arrays(self.stages, Path(self.scratch.name), prefix="variant-")
        spill_arrays(self.reference_stages, Path(self.scratch.name), prefix="reference-")

    def heads_view(self, stage: str, *, batch: int = 0, reference: bool = False) -> np.ndarray | None:
        """Batch item `batch` of a stage: (heads, tokens, ·) where it has several heads, else (tokens, ·)."""
        values = self.canonical(stage, reference=reference)
        if values is None or values.ndim < 3:
            return values
        item = values[min(batch, values.shape[0] - 1)]
        return item[0] if item.ndim == 3 and item.shape[0] == 1 else item

    def matrix(self, stage: str, *, batch: int = 0, head: int = 0, reference: bool = False) -> np.ndarray | None:
        """One (tokens x ·) matrix of a stage: batch item `batch`, head `head` where it has heads."""
        values = self.canonical(stage, reference=reference)
        if values is None:
            return None
        if values.ndim == 4:
            return values[batch, min(head, values.shape[1] - 1)]
        return values[batch] if values.ndim == 3 else values

    def to_json_dict(self) -> dict[str, Any]:
        return {
            "format_version": FORMAT_VERSION,
            "variant": self.variant,
            "seed": self.seed,
            "config": self.config,
            "n_tokens": self.n_tokens,
            "d_in": self.d_in,
            "d_out": self.d_out,
            "status": self.status,
            "error": self.error,
            "labels": self.labels,
            "reference": self.reference,
            **({"origin": self.origin} if self.origin else {}),
            "stages": self._stages_to_json(reference=False),
            "reference_stages": self._stages_to_json(reference=True),
            "expected_shapes": self.expected_shapes,
            "missing_stages": self.missing_stages,
            "reconstructed_stages": self.reconstructed_stages,
            "output_is_context": self.output_is_context,
            "returned": self.returned,
            "output_element": self.output_element,
            "returned_weights": self.returned_weights,
            "diagnostics": {k: _json_number(v) for k, v in self.diagnostics.items()},
            "head_diagnostics": {k: [_json_number(x) for x in v] for k, v in self.head_diagnostics.items()},
            "reference_diagnostics": {k: _json_number(v) for k, v in self.reference_diagnostics.items()},
            "first_divergent_stage": self.first_divergent_stage,
            "findings": [asdict(f) for f in self.findings],
            "not_checked": self.not_checked,
            "predictions": [asdict(p) for p in self.predictions],
            "weights_loaded": self.weights_loaded,
            "device": self.device,
            "dtype": self.dtype,
            "profile": {k: _json_number(v) for k, v in self.profile.items()},
            "model": _json_numbers(self.model),
        }

    @classmethod
    def from_json_dict(cls, data: dict[str, Any], path: Path | None = None) -> Record:
        version = int(data.get("format_version", 1))
        stages, shapes, views = _stages_from_json(data.get("stages") or {}, version)
        ref_stages, ref_shapes, ref_views = _stages_from_json(data.get("reference_stages") or {}, version)
        old = version < 2
        if old:  # the output was the context
            for found, found_shapes in ((stages, shapes), (ref_stages, ref_shapes)):
                if "context" in found_shapes:
                    found["output"], found_shapes["output"] = found.get("context"), found_shapes["context"]
        return cls(
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
            head_diagnostics={k: [_from_json_number(x) for x in v]
                              for k, v in (data.get("head_diagnostics") or {}).items()},
            reference_diagnostics={
                k: _from_json_number(v) for k, v in (data.get("reference_diagnostics") or {}).items()
            },
            first_divergent_stage=data.get("first_divergent_stage"),
            findings=[Finding(**f) for f in data.get("findings") or []],
            not_checked=list(data.get("not_checked") or []),
            predictions=[Prediction(**p) for p in data.get("predictions") or []],
            weights_loaded=data.get("weights_loaded") or {},
            device=str(data.get("device") or "cpu"),
            dtype=str(data.get("dtype") or "float32"),
            profile={k: _from_json_number(v) for k, v in (data.get("profile") or {}).items()},
            model=data.get("model") or {},
            path=path,
        )


    def _stages_to_json(self, *, reference: bool) -> dict:
        shapes = self.reference_stage_shapes if reference else self.stage_shapes
        out = {}
        for name, shape in shapes.items():
            values = (self.reference_stages if reference else self.stages).get(name)
            view = self.canonical(name, reference=reference)
            inline = values is not None and values.size <= INLINE_LIMIT
            out[name] = {"shape": list(shape),
                         "values": _nested(values.reshape(shape)) if inline else None,
                         "canonical_axes": list(AXES.get(name, ())),
                         "canonical_shape": list(view.shape) if view is not None else None}
        return out


def canonical_shape(stage: str, shape: tuple[int, ...]) -> tuple[int, ...]:
    """A stage's shape in the module's own rank as the canonical view's: a 2-D module gains a
    batch and a heads axis, a 3-D per-head stage (batch, tokens, ·) a heads axis."""
    rank = len(AXES.get(stage, shape))
    if len(shape) >= rank:
        return tuple(shape)
    if rank == 4 and len(shape) == 3:
        return (shape[0], 1, *shape[1:])
    return (1,) * (rank - len(shape)) + tuple(shape)


def _stages_from_json(data: dict, version: int) -> tuple[dict[str, np.ndarray | None], dict[str, list[int]],
                                                        dict[str, list[int]]]:
    """Values in the module's own rank, their shapes, and the canonical view's shapes. Format 2
    nested the values in the canonical view (`view_shape`); format 1 had 2-D stages only."""
    stages, shapes, views = {}, {}, {}
    for name, entry in data.items():
        shapes[name] = list(entry["shape"])
        view = entry.get("canonical_shape") if version >= 3 else entry.get("view_shape")
        views[name] = list(view) if view is not None else list(canonical_shape(name, tuple(shapes[name])))
        values = entry.get("values")
        stages[name] = None if values is None else np.asarray(_from_nested(values), dtype=np.float32)
        if stages[name] is not None and version < 3:
            stages[name] = stages[name].reshape(shapes[name])
        if stages[name] is not None and list(stages[name].shape) != shapes[name]:
            raise ValueError(f"stage {name}: values of shape {list(stages[name].shape)} where its shape is {shapes[name]}")
    return stages, shapes, views


def _v1_diagnostics(data: dict, old: bool) -> dict[str, float | None]:
    diagnostics = {k: _from_json_number(v) for k, v in data.items()}
    if old and "divergence_context" in diagnostics:  # format 1 had no output stage: it was the context
        for prefix in ("divergence", "relative_divergence", "non_finite", "shape_ok"):
            diagnostics.setdefault(f"{prefix}_output", diagnostics.get(f"{prefix}_context"))
    return diagnostics


def _json_number(value: float | None) -> float | str | None:
    """JSON has no NaN or infinity; they are spelled as strings so the file stays standard JSON."""
    if value is None:
        return None
    value = float(value)
    return value if math.isfinite(value) else str(value)


def _json_numbers(values: Any) -> Any:
    """Floats anywhere in nested dicts and lists as _json_number spells them."""
    if isinstance(values, dict):
        return {k: _json_numbers(v) for k, v in values.items()}
    if isinstance(values, list):
        return [_json_numbers(v) for v in values]
    return _json_number(values) if isinstance(values, float) else values


def _from_json_number(value: Any) -> float | None:
    return None if value is None else float(value)


def _nested(values: np.ndarray) -> list:
    as_list = values.astype(np.float64).tolist()
    if np.isfinite(values).all():
        return as_list
    return _map_nested(as_list, _json_number)


def _from_nested(values: list) -> list:
    return _map_nested(values, float)


def _map_nested(values: Any, fn) -> Any:
    if isinstance(values, list):
        return [_map_nested(v, fn) for v in values]
    return fn(values)


class WriteError(OSError):
    """A file attnlab could not write: the folder and the cause first, in one line."""

    def __str__(self) -> str:
        return str(self.strerror)


def write_atomic(path: Path, text: str) -> None:
    """Write via a temp file and rename, so a reader (or a Ctrl-C) never sees half a file. A write
    that fails raises WriteError naming the folder and the cause (not the temp file's name)."""
    tmp = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except OSError as exc:
        _remove(tmp)
        raise WriteError(exc.errno, f"{path.parent}: cannot write {path.name}: {exc.strerror or exc}") from None
    except BaseException:
        _remove(tmp)
        raise


def _remove(tmp: str | None) -> None:
    if tmp is not None:
        try:
            Path(tmp).unlink(missing_ok=True)
        except OSError:  # the folder went read-only: the temp file's dot-name keeps it out of every reader
            pass


def write_record(record: Record, job_dir: Path) -> Path:
    path = job_dir / RECORD_FILE
    write_atomic(path, json.dumps(record.to_json_dict(), allow_nan=False))  # no indent: json uses its C encoder only then
    record.path = path
    return path


class RecordError(ValueError):
    """A record file that cannot be read: reported by path and skipped by readers."""


STATUSES = ("ok", "failed")
# The type of every field a reader relies on: a record is any JSON, and a reader is never a traceback.
REQUIRED_TYPES: dict[str, type | tuple[type, ...]] = {"variant": str, "seed": int, "status": str}
OPTIONAL_TYPES: dict[str, type | tuple[type, ...]] = {
    "format_version": int, "config": dict, "n_tokens": int, "d_in": int, "d_out": int, "error": str,
    "labels": list, "reference": str, "stages": dict, "reference_stages": dict, "expected_shapes": dict,
    "missing_stages": list, "reconstructed_stages": list, "output_is_context": bool, "diagnostics": dict,
    "head_diagnostics": dict, "reference_diagnostics": dict, "first_divergent_stage": str, "findings": list,
    "not_checked": list, "predictions": list, "weights_loaded": dict, "device": str, "dtype": str, "profile": dict,
}


def check_record_data(data: Any) -> None:
    """Raise RecordError naming the first field of the wrong type (None is allowed where optional)."""
    if not isinstance(data, dict):
        raise RecordError(f"not a record: a JSON {type(data).__name__}, expected an object")
    for name, types in {**REQUIRED_TYPES, **OPTIONAL_TYPES}.items():
        value = data.get(name)
        if value is None and name not in REQUIRED_TYPES:
            continue
        if value is None:
            raise RecordError(f"no '{name}' field")
        if not isinstance(value, types) or (isinstance(value, bool) and types is not bool):
            raise RecordError(f"'{name}' is {type(value).__name__} {str(value)[:40]!r}, expected {_type_names(types)}")
    if data["status"] not in STATUSES:
        raise RecordError(f"'status' is {data['status'][:40]!r}, expected one of {', '.join(STATUSES)}")


def _type_names(types: type | tuple[type, ...]) -> str:
    return " or ".join(t.__name__ for t in (types if isinstance(types, tuple) else (types,)))


def read_record(path: Path) -> Record:
    """The record at `path`; any file that is not a record (not JSON, the wrong shape, a field of
    the wrong type, nesting too deep to parse) raises RecordError, one line naming the file."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
        check_record_data(data)
        return Record.from_json_dict(data, path=Path(path))
    except RecordError as exc:
        raise RecordError(f"{path}: {exc}") from None
    except (OSError, ValueError, KeyError, TypeError, AttributeError, OverflowError, RecursionError) as exc:
        reason = (str(exc).splitlines() or [""])[0][:200]
        raise RecordError(f"{path}: {type(exc).__name__}: {reason}") from None
