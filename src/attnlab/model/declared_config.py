"""What a model's config declares before anything is loaded: a saved folder's config.json, or the
`hf:TYPE` request's config class built with its size keys (nothing else of the model is built);
None for a model only known once built."""

from __future__ import annotations

import json
from typing import Any

from attnlab.model.loading import hf_config
from attnlab.model.model_spec import ModelSpec


def declared_config(spec: ModelSpec) -> dict[str, Any] | None:
    if spec.kind == "path" and spec.path is not None:
        config_file = spec.path / "config.json"
        saved = json.loads(config_file.read_text()) if config_file.is_file() else {}
        return {**saved, **spec.sizes}
    if spec.kind == "hf":
        return {**hf_config(spec).to_dict(), "model_type": spec.name}
    return None
