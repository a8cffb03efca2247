"""A model's attention sizes from its config, under each family's spellings: what a variant is built for."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from attnlab.errors import UserError
from attnlab.modules.families import family, spellings

# attnlab's size -> the key the family adapters spell it under (attnlab.modules.families)
_KEYS = {"width": "d_in", "heads": "num_heads", "kv_heads": "num_kv_heads", "context": "context_length",
         "vocab": "vocab_size", "layers": "num_layers"}


@dataclass(frozen=True)
class ModelSizes:
    width: int  # d_in and d_out of every attention layer
    heads: int
    kv_heads: int
    context: int | None
    vocab: int | None
    softcap: float | None = None  # final logit softcapping (Gemma 2)


def _get(config: Any, name: str) -> Any:
    return config.get(name) if isinstance(config, dict) else getattr(config, name, None)


def _read(config: Any, what: str) -> Any:
    name = str(_get(config, "model_type") or "")
    key = _KEYS[what]
    found = (_get(config, s) for s in (*family(name).model_spellings.get(key, ()), *spellings(key, name)))
    return next((value for value in found if value is not None), None)


def model_sizes(config: Any, label: str) -> ModelSizes:
    width, heads = _read(config, "width"), _read(config, "heads")
    if width is None or heads is None:
        raise UserError(f"{label}: its config names no width or head count "
                        f"({'/'.join(spellings('d_in'))}; {'/'.join(spellings('num_heads'))})"[:300])
    kv_heads = _read(config, "kv_heads") or heads
    row = family(str(_get(config, "model_type") or ""))
    softcap = _get(config, row.logit_softcap) if row.logit_softcap else None
    return ModelSizes(int(width), int(heads), int(kv_heads), _read(config, "context"), _read(config, "vocab"), softcap)


def constructor_values(sizes: ModelSizes, qkv_bias: bool, n_tokens: int) -> dict[str, Any]:
    """The top-level keys a variant's constructor takes, for this model's layers. Its context is the
    text's: a variant sees only it, and a mask buffer sized at the model's context (Mixtral's 131,072
    positions) would be 64 GiB."""
    return {"d_in": sizes.width, "d_out": sizes.width, "num_heads": sizes.heads, "num_kv_heads": sizes.kv_heads,
            "qkv_bias": qkv_bias, "dropout": 0.0, "context_length": n_tokens,
            "n_tokens": n_tokens}
