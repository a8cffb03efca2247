"""softcap: the source's MultiHeadAttention with logit soft-capping: the scaled scores pass through cap * tanh(s / cap) before the mask."""

import torch
import torch.nn as nn

import attnlab


@attnlab.variant(
    "softcap",
    expected_finding=("softcap", "scaled_scores"),
    observable={"n_tokens": 5},  # below, the scores can all be too small for the cap to bend
    description="MultiHeadAttention with soft-capped scaled scores, cap * tanh(s / cap), before the mask (Gemma 2 uses cap 50)",
    params={"cap": 5.0},
)
class SoftCapAttention(nn.Module):
    mask: torch.Tensor  # a buffer (register_buffer in __init__), declared so a type checker reads it as a tensor

    def __init__(self, d_in: int, d_out: int, context_length: int, dropout: float, num_heads: int,
                 qkv_bias: bool = False, cap: float = 5.0) -> None:
        super().__init__()
        assert d_out % num_heads == 0, "d_out must be divisible by num_heads"
        assert cap > 0, "cap must be positive"
        self.d_out = d_out
        self.num_heads = num_heads
        self.head_dim = d_out // num_heads
        self.cap = cap
        self.W_query = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_key = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_value = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.out_proj = nn.Linear(d_out, d_out)
        self.dropout = nn.Dropout(dropout)
        self.register_buffer("mask", torch.triu(torch.ones(context_length, context_length), diagonal=1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, num_tokens, d_in = x.shape  # (b, num_tokens, d_in)
        keys = self.W_key(x).view(b, num_tokens, self.num_heads, self.head_dim).transpose(1, 2)  # (b, num_heads, num_tokens, head_dim)
        queries = self.W_query(x).view(b, num_tokens, self.num_heads, self.head_dim).transpose(1, 2)  # (b, num_heads, num_tokens, head_dim)
        values = self.W_value(x).view(b, num_tokens, self.num_heads, self.head_dim).transpose(1, 2)  # (b, num_heads, num_tokens, head_dim)

        attn_scores = queries @ keys.transpose(2, 3)  # (b, num_heads, num_tokens, num_tokens)
        attn_scores = attn_scores / keys.shape[-1] ** 0.5  # (b, num_heads, num_tokens, num_tokens)
        # changed: capped smoothly to (-cap, cap) before the mask, so the mask's -inf stays -inf
        attn_scores = self.cap * torch.tanh(attn_scores / self.cap)  # (b, num_heads, num_tokens, num_tokens)
        attn_scores.masked_fill_(self.mask.bool()[:num_tokens, :num_tokens], -torch.inf)
        attn_weights = torch.softmax(attn_scores, dim=-1)  # (b, num_heads, num_tokens, num_tokens)
        attn_weights = self.dropout(attn_weights)  # (b, num_heads, num_tokens, num_tokens)

        context_vec: torch.Tensor = (attn_weights @ values).transpose(1, 2).reshape(b, num_tokens, self.d_out)  # (b, num_tokens, d_out)
        context_vec = self.out_proj(context_vec)  # (b, num_tokens, d_out)
        return context_vec
