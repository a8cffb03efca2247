"""BART's and T5's self-attention written out with F.scaled_dot_product_attention, and the
encoder–decoders run whole by hand with one layer's self-attention replaced: what
tests/model/test_encoder_decoders.py checks attnlab's runs against."""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

from attnlab.model.loading import load_model
from attnlab.model.model_spec import model_spec
from tests.model.conftest import TEXT

HEADS = 4


def _heads(x: torch.Tensor) -> torch.Tensor:
    b, t, d = x.shape
    return x.view(b, t, HEADS, d // HEADS).transpose(1, 2)  # (b, nh, t, hs)


def _merged(context: torch.Tensor) -> torch.Tensor:
    b, nh, t, hs = context.shape
    return context.transpose(1, 2).reshape(b, t, nh * hs)  # (b, t, d)


class HandBartAttention(nn.Module):
    """BartAttention's self-attention from its projections: scaled scores, causal or not."""

    def __init__(self, hf: nn.Module, causal: bool) -> None:
        super().__init__()
        self.hf, self.causal = hf, causal

    def forward(self, hidden_states, *args, **kwargs):
        q, k, v = (_heads(proj(hidden_states)) for proj in (self.hf.q_proj, self.hf.k_proj, self.hf.v_proj))
        context = F.scaled_dot_product_attention(q, k, v, is_causal=self.causal)  # (b, nh, t, hs)
        return self.hf.out_proj(_merged(context)), None  # (b, t, d)


class HandT5Attention(nn.Module):
    """T5Attention's self-attention built from the config: unscaled scores plus the position bias
    and mask it is given; returns the bias for the next layer as T5Attention does."""

    def __init__(self, config) -> None:
        super().__init__()
        inner = config.num_heads * config.d_kv
        self.q, self.k, self.v = (nn.Linear(config.d_model, inner, bias=False) for _ in range(3))
        self.o = nn.Linear(inner, config.d_model, bias=False)

    def forward(self, hidden_states, mask=None, position_bias=None, **kwargs):
        q, k, v = (_heads(proj(hidden_states)) for proj in (self.q, self.k, self.v))  # (b, nh, t, hs)
        bias = position_bias if mask is None else position_bias + mask  # (1, nh, t, t)
        context = F.scaled_dot_product_attention(q, k, v, attn_mask=bias, scale=1.0)  # (b, nh, t, hs)
        return self.o(_merged(context)), position_bias, None


class PlainT5Attention(nn.Module):
    """A changed T5 self-attention: T5's projections, scaled scores and no position bias; the bias
    the layer would pass on (`passed_on`) still returned, so the layers after keep theirs."""

    def __init__(self, hf: nn.Module, causal: bool, passed_on: torch.Tensor | None) -> None:
        super().__init__()
        self.hf, self.causal, self.passed_on = hf, causal, passed_on

    def forward(self, hidden_states, mask=None, position_bias=None, **kwargs):
        q, k, v = (_heads(proj(hidden_states)) for proj in (self.hf.q, self.hf.k, self.hf.v))
        context = F.scaled_dot_product_attention(q, k, v, is_causal=self.causal)  # (b, nh, t, hs)
        passed_on = position_bias if self.passed_on is None else self.passed_on
        return self.hf.o(_merged(context)), passed_on, None


def model_by_hand(sizes: dict, seed: int) -> tuple[nn.Module, dict]:
    """The model attnlab builds for `sizes` at `seed`, and its inputs: the text to the encoder and,
    shifted right behind the decoder's start token, to the decoder."""
    loaded = load_model(model_spec(sizes), seed)
    ids = torch.tensor([loaded.tokenizer.encode(TEXT)])  # (1, T)
    start = torch.tensor([[loaded.module.config.decoder_start_token_id]])  # (1, 1)
    return loaded.module, {"input_ids": ids, "decoder_input_ids": torch.cat([start, ids[:, :-1]], dim=1)}


def kl_by_hand(model: nn.Module, given: dict, swap: Callable[[nn.Module], None]) -> float:
    """The mean over the decoder's positions of KL(model || model after `swap`)."""
    with torch.no_grad():
        base = model(**given).logits[0]  # (T, vocab)
        swap(model)
        changed = model(**given).logits[0]  # (T, vocab)
    p, q = F.log_softmax(base.double(), -1), F.log_softmax(changed.double(), -1)  # (T, vocab)
    return float((p.exp() * (p - q)).sum(-1).mean())
