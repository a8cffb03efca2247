"""What a model's config declares before anything is loaded, read once when the request is checked
(attnlab.model.model_job) and handed on: a saved folder's config.json, or the `hf:TYPE` request's
config class built with its size keys (nothing else of the model is built; the load builds the
model from that same object). Nothing for a model only known once built."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from attnlab.model.loading import hf_config
from attnlab.model.model_spec import ModelSpec
from attnlab.model.sizes import read_size
from attnlab.modules.families import family


@dataclass(frozen=True)
class Declared:
    values: dict[str, Any] | None = None  # the config's keys; None: known once built
    config: Any = None  # hf:TYPE's config object, the one the model is built from
    heads: Any = None  # attnlab's head and layer counts read from `values` (attnlab.model.sizes); None: not stated
    layers: Any = None
    reads_text: bool = False  # a language model's config (not an image classifier's): it runs on text

    @property
    def model_type(self) -> str | None:
        return (self.values or {}).get("model_type")

    @property
    def seq2seq(self) -> bool:
        """An encoder–decoder's config (its layers named by stack in `layer=`)."""
        return bool(self.values and self.values.get("is_encoder_decoder"))


def read_declared(spec: ModelSpec) -> Declared:
    config = None
    if spec.kind == "path" and spec.path is not None:
        config_file = spec.path / "config.json"
        values = {**(json.loads(config_file.read_text()) if config_file.is_file() else {}), **spec.sizes}
    elif spec.kind == "hf":
        config = hf_config(spec)
        values = {**config.to_dict(), "model_type": spec.name}
    else:
        return Declared()
    return Declared(values, config, read_size(values, "heads"), read_size(values, "layers"),
                    family(str(values.get("model_type") or "")).task != "image" if values.get("model_type") else False)
