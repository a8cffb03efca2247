"""What a record is made of, each part the value of the step that found it, and `record_of`, the
one place a Record is built: the steps return values, the record is made once from them at the
end, and nothing changes it after (attnlab.record.codec's reader alone rebuilds one, from JSON)."""

from __future__ import annotations

from dataclasses import dataclass, field, fields, replace
from typing import Any

from attnlab.record.model import Effect, Finding, ModelInfo, Prediction, Record, Side


@dataclass(frozen=True)
class Setup:
    """What the run is, known before anything is built: the variant, the seed, the inputs' sizes,
    where it runs; inside a model, which model and layer."""

    variant: str
    seed: int
    config: dict[str, Any]
    labels: list[str] = field(default_factory=list)
    n_tokens: int = 0
    d_in: int = 0
    d_out: int = 0
    device: str = "cpu"
    dtype: str = "float32"
    model: ModelInfo | None = None  # its effect is the diagnosed run's: record_of adds it
    notes: list[str] = field(default_factory=list)  # what the run did other than asked, each in one sentence


@dataclass(frozen=True)
class Pair:
    """What building and capturing the pair found, as far as it got: a run failing later keeps it."""

    reference: str = "reference"  # the reference's label: a variant name, or the layer's own attention
    origin: str = ""  # a variant of yours: its plugin file, entry point, notebook class or <notebook>
    weights_loaded: dict[str, str] = field(default_factory=dict)
    scratch: Any = None  # the folder of spilled stages, kept as long as the record


@dataclass(frozen=True)
class Diagnosis:
    """What the diagnosis found of two captures: each side's stages, shapes and diagnostics (named by
    record_of), the findings and the predictions. Each field is the record's field of the same name."""

    variant: Side
    reference: Side
    expected_shapes: dict[str, list[int]]
    missing_stages: list[str]
    reconstructed_stages: list[str]
    output_is_context: bool
    returned: str
    output_element: str | None
    returned_weights: str | None
    head_diagnostics: dict[str, list[float]]
    first_divergent_stage: str | None
    findings: list[Finding]
    not_checked: list[str]
    predictions: list[Prediction]


def record_of(setup: Setup, pair: Pair = Pair(), diagnosis: Diagnosis | None = None, *, error: str | None = None,
              profile: dict[str, float] | None = None, effect: Effect | None = None) -> Record:
    """The run's record: diagnosed, or failed with `error` (one line) keeping what `pair` found
    before the failure. `profile` (profile=true's timings) and a model run's `effect` are diagnostics
    too, each a column beside the diagnosis's own."""
    diagnosed = _diagnosed(setup, diagnosis, profile or {}, effect) if diagnosis is not None else {}
    # the setup's variant and the pair's reference are the sides' names
    sides = {"variant": replace(diagnosed.get("variant", Side()), name=setup.variant),
             "reference": replace(diagnosed.get("reference", Side()), name=pair.reference)}
    return Record(**{**_values(setup), **_values(pair), **diagnosed, **sides},
                  status="ok" if error is None else "failed", error=error)


def _diagnosed(setup: Setup, diagnosis: Diagnosis, profile: dict[str, float], effect: Effect | None) -> dict[str, Any]:
    """The record's fields a diagnosed run adds: the diagnosis's, the variant's diagnostics joined by
    the profile's timings and the model's effects (`effect_kl_mean`, the learner's check's `end_to_end_kl_mean`)."""
    model = replace(setup.model, effect=effect) if setup.model is not None else None
    effects = {"effect": effect, "end_to_end": model.end_to_end if model is not None else None}
    columns = {f"{name}_{key}": value for name, each in effects.items() if each is not None for key, value in each.items()}
    variant = replace(diagnosis.variant, diagnostics={**diagnosis.variant.diagnostics, **profile, **columns})
    return {**_values(diagnosis), "variant": variant, "profile": profile, "model": model}


def _values(part: Setup | Pair | Diagnosis) -> dict[str, Any]:
    """A part's fields by name, its values as they are (not copied): the record's fields of the same names."""
    return {f.name: getattr(part, f.name) for f in fields(part)}
