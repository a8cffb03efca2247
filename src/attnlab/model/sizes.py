"""A model's attention sizes from its config, under each family's spellings: what a variant is built for."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from attnlab.errors import UserError

SPELLINGS = {
    "width": ("hidden_size", "n_embd", "emb_dim", "d_model"),
    "heads": ("num_attention_heads", "n_head", "n_heads"),
    "kv_heads": ("num_key_value_heads", "n_kv_heads", "n_kv_head"),
    "context": ("max_position_embeddings", "n_positions", "block_size", "context_length"),
    "vocab": ("vocab_size",),
    "layers": ("num_hidden_layers", "n_layer", "n_layers"),
}


@dataclass(frozen=True)
class ModelSizes:
    width: int  # d_in and d_out of every attention layer
    heads: int
    kv_heads: int
    context: int | None
    vocab: int | None
    softcap: float | None = None  # final logit softcapping (Gemma 2)


def _read(config: Any, what: str) -> Any:
    for spelling in SPELLINGS[what]:
        value = config.get(spelling) if isinstance(config, dict) else getattr(config, spelling, None)
        if value is not None:
            return value
    return None


def model_sizes(config: Any, label: str) -> ModelSizes:
    width, heads = _read(config, "width"), _read(config, "heads")
    if width is None or heads is None:
        raise UserError(f"{label}: its config names no width or head count "
                        f"({'/'.join(SPELLINGS['width'])}; {'/'.join(SPELLINGS['heads'])})")
    kv_heads = _read(config, "kv_heads") or heads
    softcap = config.get("final_logit_softcapping") if isinstance(config, dict) else getattr(config, "final_logit_softcapping", None)
    return ModelSizes(int(width), int(heads), int(kv_heads), _read(config, "context"), _read(config, "vocab"), softcap)


def constructor_values(sizes: ModelSizes, qkv_bias: bool, n_tokens: int) -> dict[str, Any]:
    """The top-level keys a variant's constructor takes, for this model's layers. Its context is the
    text's: a variant sees only it, and a mask buffer sized at the model's context (Mixtral's 131,072
    positions) would be 64 GiB."""
    return {"d_in": sizes.width, "d_out": sizes.width, "num_heads": sizes.heads, "num_kv_heads": sizes.kv_heads,
            "qkv_bias": qkv_bias, "dropout": 0.0, "context_length": n_tokens,
            "n_tokens": n_tokens}
