"""A run inside a model, as the app read it from the config once (attnlab.app.job_settings): the model,
the reference model of a learner's check, the edit, the layers, the inputs, and what every record
of the run holds. Nothing below the app reads the config itself."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from attnlab.model.interventions import Intervention
from attnlab.model.model_spec import ModelSpec


@dataclass(frozen=True)
class ModelTexts:
    """What a language model runs on: `inputs=text` (one text or `texts`) or `inputs=ids`."""

    kind: str | None
    text: Any = None
    texts: tuple[Any, ...] | None = None
    ids: Any = None  # a list of ids or the file holding them (attnlab.inputs.token_ids.read_ids)
    max_tokens: int | None = None


@dataclass(frozen=True)
class ModelRequest:
    """One model run's settings, checked as far as they can be without loading anything."""

    model: ModelSpec
    reference_model: ModelSpec | None  # the learner's check: the model compared with it, layer by layer
    edit: Intervention | None
    layer: Any  # `layer=`: None, an index, a list, a stack's name or "all" (attnlab.model.stacks)
    variant: str
    params: dict[str, Any]
    reference: str
    expect: dict[str, Any]
    seed: int
    n_seeds: int
    inputs: ModelTexts
    config: dict[str, Any]  # the resolved config, as each record holds it

    @property
    def models(self) -> tuple[ModelSpec, ...]:
        """The model, then the reference model of a learner's check."""
        return (self.model,) if self.reference_model is None else (self.model, self.reference_model)
