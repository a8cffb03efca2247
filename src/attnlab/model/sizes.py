"""A model's attention sizes from its config, under each family's spellings: what a variant is built for."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn

from attnlab.errors import UserError
from attnlab.modules.families import Family, family, spellings
from attnlab.modules.roles import declared_count

# attnlab's size -> the key the family adapters spell it under (attnlab.modules.families)
_KEYS = {"width": "d_in", "heads": "num_heads", "kv_heads": "num_kv_heads", "context": "context_length",
         "vocab": "vocab_size", "layers": "num_layers"}


@dataclass(frozen=True)
class LogitScaling:
    """What a model's forward does to its head's output, as its family declares it: attnlab applies it
    where it makes the logits itself (a run without logits of its own)."""

    multiplier: float = 1.0  # Cohere multiplies by its logit_scale; Granite divides by its logits_scaling
    softcap: float | None = None  # Gemma 2 caps its final logits with tanh

    def apply(self, logits: Tensor) -> Tensor:
        """`logits`: (..., vocab) the head's output, scaled as the model's own forward scales it."""
        logits = logits * self.multiplier if self.multiplier != 1.0 else logits  # (..., vocab)
        return torch.tanh(logits / self.softcap) * self.softcap if self.softcap else logits  # (..., vocab)


@dataclass(frozen=True)
class ModelSizes:
    width: int  # d_in and d_out of every attention layer
    heads: int
    kv_heads: int
    context: int | None
    vocab: int | None
    logits: LogitScaling = LogitScaling()


def _get(config: Any, name: str) -> Any:
    return config.get(name) if isinstance(config, dict) else getattr(config, name, None)


def read_size(config: Any, what: str) -> Any:
    """One of attnlab's sizes (_KEYS) from a config object or dict, under the family's spellings; None: not there."""
    name = str(_get(config, "model_type") or "")
    key = _KEYS[what]
    found = (_get(config, s) for s in (*family(name).model_spellings.get(key, ()), *spellings(key, name)))
    return next((value for value in found if value is not None), None)


def model_sizes(config: Any, label: str, attention: nn.Module | None = None) -> ModelSizes:
    """The sizes its config declares; the key/value heads its `attention` module keeps where that
    says otherwise (Falcon's multi-query layers keep one whatever the config's num_kv_heads). A
    composite's (Gemma 3's image-and-text config) are its text config's, the one its attention holds."""
    config = _sized(config, attention)
    width, heads = read_size(config, "width"), read_size(config, "heads")
    if width is None or heads is None:
        raise UserError(f"{label}: its config names no width or head count "
                        f"({'/'.join(spellings('d_in'))}; {'/'.join(spellings('num_heads'))})"[:300])
    kv_heads = read_size(config, "kv_heads") or heads
    if attention is not None:
        kept = declared_count(attention, "num_kv_heads")
        if kept and kept != kv_heads and int(heads) % kept == 0 and declared_count(attention, "num_heads") == heads:
            kv_heads = kept
    row = family(str(_get(config, "model_type") or ""))
    context = read_size(config, "context")  # XLNet's -1: no limit
    return ModelSizes(int(width), int(heads), int(kv_heads), context if context is None or context > 0 else None,
                      read_size(config, "vocab"), _logit_scaling(config, row))


def _sized(config: Any, attention: nn.Module | None) -> Any:
    """`config` where it names a width, else the attention module's own config, else its text config."""
    if read_size(config, "width") is not None:
        return config
    own = getattr(attention, "config", None)
    if own is not None and read_size(own, "width") is not None:
        return own
    text = getattr(config, "get_text_config", None)
    return text() if callable(text) else config


def _logit_scaling(config: Any, row: Family) -> LogitScaling:
    """The family's declared logit scaling, read from this model's config (unset attributes: none)."""
    multiplier = float(_get(config, row.logit_scale) or 1.0) if row.logit_scale else 1.0
    if row.logit_divide and _get(config, row.logit_divide):
        multiplier /= float(_get(config, row.logit_divide))
    softcap = _get(config, row.logit_softcap) if row.logit_softcap else None
    return LogitScaling(multiplier, float(softcap) if softcap else None)


def constructor_values(sizes: ModelSizes, qkv_bias: bool, n_tokens: int) -> dict[str, Any]:
    """The top-level keys a variant's constructor takes, for this model's layers. Its context is the
    text's: a variant sees only it, and a mask buffer sized at the model's context (Mixtral's 131,072
    positions) would be 64 GiB."""
    return {"d_in": sizes.width, "d_out": sizes.width, "num_heads": sizes.heads, "num_kv_heads": sizes.kv_heads,
            "qkv_bias": qkv_bias, "dropout": 0.0, "context_length": n_tokens,
            "n_tokens": n_tokens}
