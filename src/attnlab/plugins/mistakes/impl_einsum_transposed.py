"""The bonus notebook's historical einsum bug: the weights were stored (d_out, d_in), as nn.Linear
stores them, but contracted as (d_in, d_out) by "bnd,do->bno". With d_in == d_out the matrix is
only read transposed, a relabelled parameter that trains the same; with d_in != d_out the einsum
cannot run. The notebook's sizes had d_in == d_out, so its own test could not see it.
"""

import torch
import torch.nn as nn

import attnlab


@attnlab.variant(
    "impl_einsum_transposed",
    description="the notebook's old MHAEinsum bug: weights stored (d_out, d_in), contracted as (d_in, d_out)",
    reference="multi_head_attention",
)
class MHAEinsum(nn.Module):
    mask: torch.Tensor  # a buffer (register_buffer in __init__), declared so a type checker reads it as a tensor

    def __init__(self, d_in: int, d_out: int, context_length: int, dropout: float, num_heads: int,
                 qkv_bias: bool = False) -> None:
        super().__init__()
        assert d_out % num_heads == 0, "d_out must be divisible by num_heads"
        self.d_out = d_out
        self.num_heads = num_heads
        self.head_dim = d_out // num_heads
        self.W_query = nn.Parameter(torch.randn(d_out, d_in))  # changed: (d_out, d_in), read below as (d_in, d_out)
        self.W_key = nn.Parameter(torch.randn(d_out, d_in))  # changed
        self.W_value = nn.Parameter(torch.randn(d_out, d_in))  # changed
        self.out_proj = nn.Linear(d_out, d_out)
        self.dropout = nn.Dropout(dropout)
        self.register_buffer("mask", torch.triu(torch.ones(context_length, context_length), diagonal=1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, n, _ = x.shape
        Q = torch.einsum("bnd,do->bno", x, self.W_query)  # (b, num_tokens, d_out)
        K = torch.einsum("bnd,do->bno", x, self.W_key)  # (b, num_tokens, d_out)
        V = torch.einsum("bnd,do->bno", x, self.W_value)  # (b, num_tokens, d_out)
        Q = Q.view(b, n, self.num_heads, self.head_dim).transpose(1, 2)  # (b, num_heads, num_tokens, head_dim)
        K = K.view(b, n, self.num_heads, self.head_dim).transpose(1, 2)  # (b, num_heads, num_tokens, head_dim)
        V = V.view(b, n, self.num_heads, self.head_dim).transpose(1, 2)  # (b, num_heads, num_tokens, head_dim)

        scores = torch.einsum("bhnd,bhmd->bhnm", Q, K) / (self.head_dim ** 0.5)  # (b, num_heads, num_tokens, num_tokens)
        scores = scores.masked_fill(self.mask[:n, :n].bool(), -torch.inf)
        attn_weights = torch.softmax(scores, dim=-1)  # (b, num_heads, num_tokens, num_tokens)
        attn_weights = self.dropout(attn_weights)

        context_vec: torch.Tensor = torch.einsum("bhnm,bhmd->bhnd", attn_weights, V)  # (b, num_heads, num_tokens, head_dim)
        context_vec = context_vec.transpose(1, 2).reshape(b, n, self.d_out)  # (b, num_tokens, d_out)
        context_vec = self.out_proj(context_vec)  # (b, num_tokens, d_out)
        return context_vec
