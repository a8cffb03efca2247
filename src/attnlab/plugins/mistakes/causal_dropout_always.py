"""CausalAttention with dropout hard-coded on: F.dropout(..., training=True) also in eval mode."""

import torch
import torch.nn as nn
import torch.nn.functional as F

import attnlab


@attnlab.variant(
    "causal_dropout_always",
    description="CausalAttention: F.dropout(attn_weights, p=0.5, training=True) drops weights in eval mode too",
    expected_finding=("dropout_active", "weights_applied"),
    tags=("multi_head",),
)
class CausalAttention(nn.Module):
    mask: torch.Tensor  # a buffer (register_buffer in __init__), declared so a type checker reads it as a tensor

    def __init__(self, d_in: int, d_out: int, context_length: int, dropout: float, qkv_bias: bool = False) -> None:
        super().__init__()
        self.d_out = d_out
        self.W_query = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_key = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_value = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.dropout = nn.Dropout(dropout)
        # a buffer, not a parameter: it moves with the module and is never trained
        self.register_buffer("mask", torch.triu(torch.ones(context_length, context_length), diagonal=1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, num_tokens, d_in = x.shape  # (b, num_tokens, d_in)
        keys = self.W_key(x)  # (b, num_tokens, d_out)
        queries = self.W_query(x)  # (b, num_tokens, d_out)
        values = self.W_value(x)  # (b, num_tokens, d_out)
        attn_scores = queries @ keys.transpose(1, 2)  # (b, num_tokens, num_tokens)
        # in place, as the source does; the mask is cut to the tokens actually given
        attn_scores.masked_fill_(self.mask.bool()[:num_tokens, :num_tokens], -torch.inf)
        attn_weights = torch.softmax(attn_scores / keys.shape[-1] ** 0.5, dim=-1)  # (b, num_tokens, num_tokens)
        attn_weights = F.dropout(attn_weights, p=0.5, training=True)  # changed: on in eval mode too
        context_vec: torch.Tensor = attn_weights @ values  # (b, num_tokens, d_out)
        return context_vec
