"""The bonus notebook's historical wrapper bug: every head got the full d_out instead of
d_out // num_heads, so the output had num_heads * d_out columns ((8, 1024, 9216) for 768 and 12
heads) and the benchmark timed a module twelve times too wide.
"""

import torch
import torch.nn as nn

import attnlab


class CausalAttention(nn.Module):
    mask: torch.Tensor  # a buffer (register_buffer in __init__), declared so a type checker reads it as a tensor

    def __init__(self, d_in: int, d_out: int, context_length: int, dropout: float, qkv_bias: bool = False) -> None:
        super().__init__()
        self.d_out = d_out
        self.W_query = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_key = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_value = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.dropout = nn.Dropout(dropout)
        self.register_buffer("mask", torch.triu(torch.ones(context_length, context_length), diagonal=1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, num_tokens, d_in = x.shape  # (b, num_tokens, d_in)
        keys = self.W_key(x)  # (b, num_tokens, d_out)
        queries = self.W_query(x)  # (b, num_tokens, d_out)
        values = self.W_value(x)  # (b, num_tokens, d_out)
        attn_scores = queries @ keys.transpose(1, 2)  # (b, num_tokens, num_tokens)
        attn_scores.masked_fill_(self.mask.bool()[:num_tokens, :num_tokens], -torch.inf)
        attn_weights = torch.softmax(attn_scores / keys.shape[-1] ** 0.5, dim=-1)  # (b, num_tokens, num_tokens)
        attn_weights = self.dropout(attn_weights)  # (b, num_tokens, num_tokens)
        context_vec: torch.Tensor = attn_weights @ values  # (b, num_tokens, d_out)
        return context_vec


@attnlab.variant(
    "impl_wrapper_undivided",
    description="the notebook's old Ch03_MHA_Wrapper bug: each head gets the full d_out, num_heads * d_out columns out",
    expected_finding=("shape_projection", "output"),
    tags=("multi_head",),
    reference="multi_head_attention",
)
class Ch03_MHA_Wrapper(nn.Module):
    def __init__(self, d_in: int, d_out: int, context_length: int, dropout: float, num_heads: int,
                 qkv_bias: bool = False) -> None:
        super().__init__()
        self.heads = nn.ModuleList(
            # changed: d_out per head, not d_out // num_heads
            [CausalAttention(d_in, d_out, context_length, dropout, qkv_bias) for _ in range(num_heads)]
        )
        self.out_proj = nn.Linear(d_out * num_heads, d_out * num_heads)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        context_vec: torch.Tensor = torch.cat([head(x) for head in self.heads], dim=-1)  # (b, num_tokens, num_heads * d_out)
        context_vec = self.out_proj(context_vec)  # (b, num_tokens, num_heads * d_out)
        return context_vec
