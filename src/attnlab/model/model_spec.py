"""Which model to run in, read from the config's `model` (or `reference_model`) block.

Named one of four ways: `model=hf:TYPE` (a Hugging Face causal LM built from its config class, random
weights, size keys such as `model.n_layer=2`), `model.path=DIR` (a saved folder), `model.hub=REPO_ID`
(the local Hugging Face cache only) or `model=NAME` (a class of your own in ./models/NAME.py, its
weights from `model.weights=FILE.safetensors`). Every other key is a size or setting of the model's
config (`model.n_layer=2`, `model.num_key_value_heads=2`).
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from attnlab.errors import UserError

# keys of the block that are not the model config's own attributes
OWN_KEYS = ("name", "path", "hub", "weights", "attention_path", "attn_implementation")
ATTN_IMPLEMENTATIONS = ("eager", "sdpa")
SAVE_HINT = "safetensors.torch.save_file(model.state_dict(), 'model.safetensors')"


@dataclass(frozen=True)
class ModelSpec:
    """One model request. `kind`: "hf" (built from a config class), "path", "hub" or "user"."""

    key: str  # "model" or "reference_model", for messages
    kind: str
    name: str | None = None  # the model type (hf) or the file in ./models/ (user)
    path: Path | None = None
    hub: str | None = None
    weights: Path | None = None  # a safetensors state_dict for a model of your own
    attention_path: str | None = None  # e.g. "blocks.*.attention": where the attention modules are
    attn_implementation: str = "eager"
    sizes: dict[str, Any] = field(default_factory=dict)

    @property
    def label(self) -> str:
        return {"hf": f"hf:{self.name}", "path": str(self.path), "hub": str(self.hub)}.get(self.kind, str(self.name))


def is_requested(block: Mapping[str, Any] | None) -> bool:
    return block is not None and any(block.get(k) for k in ("name", "path", "hub"))


def model_spec(block: Mapping[str, Any], key: str = "model") -> ModelSpec:
    """The request in `block`, checked: exactly one of a name, a path, a hub id."""
    block = dict(block)
    named = [k for k in ("name", "path", "hub") if block.get(k)]
    if len(named) != 1:
        raise UserError(f"{key}: name one model: {key}=hf:TYPE, {key}=NAME (./models/NAME.py), {key}.path=DIR "
                        f"or {key}.hub=REPO_ID (got {', '.join(f'{key}.{k}' for k in named) or 'none'})")
    implementation = str(block.get("attn_implementation") or "eager")
    if implementation not in ATTN_IMPLEMENTATIONS:
        raise UserError(f"{key}.attn_implementation={implementation}: allowed are {', '.join(ATTN_IMPLEMENTATIONS)}")
    sizes = {k: v for k, v in block.items() if k not in OWN_KEYS}
    for size in sizes:
        close = difflib.get_close_matches(size, OWN_KEYS, n=1, cutoff=0.75)
        if close:
            raise UserError(f"{key}.{size}: unknown key; did you mean '{key}.{close[0]}'?")
    spec = partial(ModelSpec, key=key, attention_path=block.get("attention_path"), attn_implementation=implementation,
                   sizes=sizes)
    weights = Path(str(block["weights"])).expanduser() if block.get("weights") else None
    if weights is not None and weights.suffix != ".safetensors":
        raise UserError(f"{key}.weights={weights}: attnlab loads safetensors only, never a pickle; convert once "
                        f"with {SAVE_HINT}")
    if block.get("path"):
        return spec(kind="path", path=Path(str(block["path"])).expanduser(), weights=weights)
    if block.get("hub"):
        return spec(kind="hub", hub=str(block["hub"]), weights=weights)
    name = str(block["name"])
    if name.startswith("hf:"):
        if weights is not None:
            raise UserError(f"{key}.weights: {key}=hf:TYPE has random weights; a saved model is {key}.path=DIR")
        return spec(kind="hf", name=name[3:])
    return spec(kind="user", name=name, weights=weights)
