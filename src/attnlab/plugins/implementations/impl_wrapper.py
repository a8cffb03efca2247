"""Ch03_MHA_Wrapper of the source's bonus notebook (mha-implementations): the ch. 3 wrapper whose
heads each get d_out // num_heads columns, combined by an output projection, as the corrected
notebook builds it. `mha_wrapper` keeps the book's per-head d_out; this one is the benchmark's.
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
        keys = self.W_key(x)  # (b, num_tokens, head_dim)
        queries = self.W_query(x)  # (b, num_tokens, head_dim)
        values = self.W_value(x)  # (b, num_tokens, head_dim)
        attn_scores = queries @ keys.transpose(1, 2)  # (b, num_tokens, num_tokens)
        attn_scores.masked_fill_(self.mask.bool()[:num_tokens, :num_tokens], -torch.inf)
        attn_weights = torch.softmax(attn_scores / keys.shape[-1] ** 0.5, dim=-1)  # (b, num_tokens, num_tokens)
        attn_weights = self.dropout(attn_weights)  # (b, num_tokens, num_tokens)
        context_vec: torch.Tensor = attn_weights @ values  # (b, num_tokens, head_dim)
        return context_vec


@attnlab.variant(
    "impl_wrapper",
    description="notebook's Ch03_MHA_Wrapper: num_heads CausalAttention heads of d_out // num_heads columns, then out_proj",
)
class Ch03_MHA_Wrapper(nn.Module):
    def __init__(self, d_in: int, d_out: int, context_length: int, dropout: float, num_heads: int,
                 qkv_bias: bool = False) -> None:
        super().__init__()
        # changed: the notebook passes d_out=embed_dim // num_heads; here d_out is the total and each head takes its share
        head_dim = d_out // num_heads
        self.heads = nn.ModuleList(
            [CausalAttention(d_in, head_dim, context_length, dropout, qkv_bias) for _ in range(num_heads)]
        )
        self.out_proj = nn.Linear(head_dim * num_heads, head_dim * num_heads)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        context_vec: torch.Tensor = torch.cat([head(x) for head in self.heads], dim=-1)  # (b, num_tokens, num_heads * head_dim)
        context_vec = self.out_proj(context_vec)  # (b, num_tokens, d_out)
        return context_vec
