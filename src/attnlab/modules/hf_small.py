"""The small owning model `hf_record` runs: its config shrunk where the attention never looks (the
layers after the recorded one, the vocabulary, the feed-forward widths, the experts), and built only
when its parameters fit a budget, so recording a call never builds a full-size model (a 6B-parameter
MoE at the survey's widths).

Shrinking is tried most first: a config whose own checks refuse a shrunk value (a layer pattern of
a fixed length, experts in groups) is tried with less shrunk, then as the module's own; each is
built on the meta device first, so its size is known before any memory is used.
"""

from __future__ import annotations

import copy
from typing import Any

import torch
from torch import nn

BUDGET = 60_000_000  # parameters a recording model may have (240 MB in float32)
LAYERS = ("num_hidden_layers", "num_layers", "n_layer", "n_layers", "encoder_layers", "decoder_layers",
          "num_encoder_layers", "num_decoder_layers")
VOCAB, WIDTH, EXPERTS = 512, 128, 4
FEED_FORWARD = ("ffn_dim", "encoder_ffn_dim", "decoder_ffn_dim", "n_inner", "d_ff", "dim_feedforward")
EXPERT_COUNTS = ("num_experts", "num_local_experts", "n_routed_experts", "moe_num_experts")
ROUTED = ("num_experts_per_tok", "moe_k", "num_experts_per_token")


def built(model_cls: type, config: Any, layer: int, device: torch.device, dtype: torch.dtype) -> nn.Module:
    """`model_cls` from the most shrunk form of `config` it can be built from within the budget
    (its own error, or a one-line size error, where none)."""
    problem: Exception | None = None
    for level in (2, 1, 0):
        small = shrunk(config, layer, level)
        try:
            with torch.device("meta"):
                size = sum(p.numel() for p in model_cls(small).parameters())
        except Exception as exc:  # noqa: BLE001 - a config its own checks refuse at this shrinking: less shrunk
            problem = problem or exc
            continue
        if size > BUDGET:
            raise ValueError(f"{size / 1e6:.0f}M parameters even with its layers, vocabulary and experts shrunk")
        return model_cls(small).to(device=device, dtype=dtype).eval()
    assert problem is not None
    raise problem


def shrunk(config: Any, layer: int, level: int) -> Any:
    """A copy of `config` (eager attention): level 0 as it is, 1 with the layers after `layer` cut,
    2 also with a small vocabulary, feed-forward and expert count; its sub-configs alike."""
    small = copy.deepcopy(config)
    small._attn_implementation = getattr(config, "_attn_implementation", None) or "eager"
    if level:
        _shrink(small, layer, level)
    return small


def _shrink(config: Any, layer: int, level: int) -> None:
    from transformers import PretrainedConfig

    for value in list(vars(config).values()):
        if isinstance(value, PretrainedConfig):
            _shrink(value, 0, level)
    for key in LAYERS:
        count = getattr(config, key, None)
        if isinstance(count, int) and count > layer + 1:
            setattr(config, key, layer + 1)
            for name, value in list(vars(config).items()):  # per-layer lists (layer_types) cut alike
                if isinstance(value, (list, tuple)) and len(value) == count and not name.startswith("_"):
                    setattr(config, name, type(value)(value[:layer + 1]))
    if level < 2:
        return
    _smaller(config, ("vocab_size",), VOCAB)
    if isinstance(getattr(config, "pad_token_id", None), int) and config.pad_token_id >= VOCAB:
        config.pad_token_id = None  # its padding row past the smaller vocabulary
    _smaller(config, [k for k in vars(config) if k.endswith("intermediate_size")] + list(FEED_FORWARD), WIDTH)
    _smaller(config, EXPERT_COUNTS, EXPERTS)
    _smaller(config, ROUTED, 2)


def _smaller(config: Any, keys: Any, bound: int) -> None:
    for key in keys:
        value = getattr(config, key, None)
        if isinstance(value, int) and not isinstance(value, bool) and value > bound:
            setattr(config, key, bound)
