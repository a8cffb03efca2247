"""MHAEinsum of the source's bonus notebook: projections and score products as torch.einsum, with
the weights stored (d_in, d_out) as the contraction "bnd,do->bno" reads them."""

import math

import torch
import torch.nn as nn

import attnlab


@attnlab.variant(
    "impl_einsum",
    description="notebook's MHAEinsum: W_query, W_key, W_value as (d_in, d_out) parameters, every product an einsum",
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
        self.W_query = nn.Parameter(torch.randn(d_in, d_out))
        self.W_key = nn.Parameter(torch.randn(d_in, d_out))
        self.W_value = nn.Parameter(torch.randn(d_in, d_out))
        if qkv_bias:
            self.bias_q = nn.Parameter(torch.zeros(d_out))
            self.bias_k = nn.Parameter(torch.zeros(d_out))
            self.bias_v = nn.Parameter(torch.zeros(d_out))
        else:
            self.register_parameter("bias_q", None)
            self.register_parameter("bias_k", None)
            self.register_parameter("bias_v", None)
        self.out_proj = nn.Linear(d_out, d_out)
        self.dropout = nn.Dropout(dropout)
        self.register_buffer("mask", torch.triu(torch.ones(context_length, context_length), diagonal=1))
        for weight in (self.W_query, self.W_key, self.W_value):
            nn.init.kaiming_uniform_(weight, a=math.sqrt(5))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, n, _ = x.shape
        Q = torch.einsum("bnd,do->bno", x, self.W_query)  # (b, num_tokens, d_out)
        K = torch.einsum("bnd,do->bno", x, self.W_key)  # (b, num_tokens, d_out)
        V = torch.einsum("bnd,do->bno", x, self.W_value)  # (b, num_tokens, d_out)
        if self.bias_q is not None:
            Q += self.bias_q
            K += self.bias_k
            V += self.bias_v
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
