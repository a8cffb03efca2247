"""sliding_window: the source's MultiHeadAttention with a sliding-window causal mask: each query sees its last `window` tokens."""

import torch
import torch.nn as nn

import attnlab


@attnlab.variant(
    "sliding_window",
    expected_finding=("window", "scaled_scores"),
    observable={"n_tokens": 4},  # the default window of 3 hides a key from 4 tokens on
    description="MultiHeadAttention whose causal mask also hides keys `window` or more tokens back (window 3: token 5 sees 3, 4, 5)",
    params={"window": 3},
)
class SlidingWindowAttention(nn.Module):
    mask: torch.Tensor  # a buffer (register_buffer in __init__), declared so a type checker reads it as a tensor

    def __init__(self, d_in: int, d_out: int, context_length: int, dropout: float, num_heads: int,
                 qkv_bias: bool = False, window: int = 3) -> None:
        super().__init__()
        assert d_out % num_heads == 0, "d_out must be divisible by num_heads"
        assert window >= 1, "a query must see at least its own token: window >= 1"
        self.d_out = d_out
        self.num_heads = num_heads
        self.head_dim = d_out // num_heads
        self.W_query = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_key = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_value = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.out_proj = nn.Linear(d_out, d_out)
        self.dropout = nn.Dropout(dropout)
        ones = torch.ones(context_length, context_length)
        # changed: the keys after the query and the keys `window` or more tokens before it
        self.register_buffer("mask", torch.triu(ones, diagonal=1) + torch.tril(ones, diagonal=-window))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, num_tokens, d_in = x.shape  # (b, num_tokens, d_in)
        keys = self.W_key(x).view(b, num_tokens, self.num_heads, self.head_dim).transpose(1, 2)  # (b, num_heads, num_tokens, head_dim)
        queries = self.W_query(x).view(b, num_tokens, self.num_heads, self.head_dim).transpose(1, 2)  # (b, num_heads, num_tokens, head_dim)
        values = self.W_value(x).view(b, num_tokens, self.num_heads, self.head_dim).transpose(1, 2)  # (b, num_heads, num_tokens, head_dim)

        attn_scores = queries @ keys.transpose(2, 3)  # (b, num_heads, num_tokens, num_tokens)
        attn_scores.masked_fill_(self.mask.bool()[:num_tokens, :num_tokens], -torch.inf)
        attn_weights = torch.softmax(attn_scores / keys.shape[-1] ** 0.5, dim=-1)  # (b, num_heads, num_tokens, num_tokens)
        attn_weights = self.dropout(attn_weights)  # (b, num_heads, num_tokens, num_tokens)

        context_vec: torch.Tensor = (attn_weights @ values).transpose(1, 2).reshape(b, num_tokens, self.d_out)  # (b, num_tokens, d_out)
        context_vec = self.out_proj(context_vec)  # (b, num_tokens, d_out)
        return context_vec
