"""What a recording model (`hf_record`) is given beside its tokens when it fails on them alone:
the inputs its forward takes that attnlab can make from the tokens' count, each by its name.

  position_ids  0 .. T-1 per batch item: a fairseq-style model (RoBERTa's, I-BERT's, LUKE's) numbers
                its tokens from its padding id + 1, past a position table as long as the run's context
  bbox          a layout's boxes (b, T, 4) as (left, top, right, bottom), one distinct box per token
                inside the model's 2-D position table: a layout model (BROS, LayoutLM) refuses to run
                without them, and its attention's inputs made from them (BROS's bbox_pos_emb) are its own

Given only on a retry, so a model that runs on its tokens alone is recorded as before.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from attnlab.modules.arguments import forward_parameters

_TOKENS = ("input_ids", "inputs_embeds")  # the inputs whose (b, T) the extras follow
_BOX_TABLE = 1000  # a layout's coordinates when its config names no 2-D table (LayoutLM's 0..1000)


def extras(model: nn.Module, inputs: dict[str, Any]) -> dict[str, Any]:
    """The inputs of `_MADE` the model's forward takes and `inputs` lacks; none where `inputs` holds no tokens."""
    tokens = next((inputs[k] for k in _TOKENS if isinstance(inputs.get(k), torch.Tensor)), None)
    if tokens is None:
        return {}
    batch, count = tokens.shape[:2]
    accepted = {p.name for p in forward_parameters(type(model))}
    return {name: make(model.config, batch, count, tokens.device) for name, make in _MADE.items()
            if name in accepted and inputs.get(name) is None}


def _positions(config: Any, batch: int, count: int, device: torch.device) -> torch.Tensor:
    return torch.arange(count, device=device).expand(batch, count)  # (b, T)


def _boxes(config: Any, batch: int, count: int, device: torch.device) -> torch.Tensor:
    table = getattr(config, "max_2d_position_embeddings", None) or _BOX_TABLE
    left = torch.arange(count, device=device) % max(table - 1, 1)  # (T,)
    box = torch.stack([left, left, left + 1, left + 1], dim=-1)  # (T, 4): a unit square per token
    return box.expand(batch, count, 4)  # (b, T, 4)


_MADE = {"position_ids": _positions, "bbox": _boxes}
