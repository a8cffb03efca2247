"""Multi-head attention written with torch.einsum and (d_in, d_out) parameter matrices."""

import torch
import torch.nn as nn


class EinsumMultiHeadAttention(nn.Module):
    def __init__(self, d_in, d_out, context_length, dropout, num_heads, qkv_bias=False):
        super().__init__()
        assert d_out % num_heads == 0, "d_out must be divisible by num_heads"
        self.num_heads, self.head_dim = num_heads, d_out // num_heads
        self.W_query = nn.Parameter(torch.randn(d_in, d_out) / d_in ** 0.5)
        self.W_key = nn.Parameter(torch.randn(d_in, d_out) / d_in ** 0.5)
        self.W_value = nn.Parameter(torch.randn(d_in, d_out) / d_in ** 0.5)
        # biases as separate vectors, the way einsum-style code keeps them
        self.b_query = nn.Parameter(torch.zeros(d_out)) if qkv_bias else None
        self.b_key = nn.Parameter(torch.zeros(d_out)) if qkv_bias else None
        self.b_value = nn.Parameter(torch.zeros(d_out)) if qkv_bias else None
        self.out_proj = nn.Linear(d_out, d_out)
        self.dropout = nn.Dropout(dropout)
        self.register_buffer("mask", torch.triu(torch.ones(context_length, context_length), diagonal=1).bool())

    def forward(self, x):
        b, n, _ = x.shape
        queries = torch.einsum("bnd,de->bne", x, self.W_query)  # (b, num_tokens, d_out)
        keys = torch.einsum("bnd,de->bne", x, self.W_key)  # (b, num_tokens, d_out)
        values = torch.einsum("bnd,de->bne", x, self.W_value)  # (b, num_tokens, d_out)
        if self.b_query is not None:
            queries, keys, values = queries + self.b_query, keys + self.b_key, values + self.b_value
        queries = queries.view(b, n, self.num_heads, self.head_dim)  # (b, num_tokens, num_heads, head_dim)
        keys = keys.view(b, n, self.num_heads, self.head_dim)  # (b, num_tokens, num_heads, head_dim)
        values = values.view(b, n, self.num_heads, self.head_dim)  # (b, num_tokens, num_heads, head_dim)
        scores = torch.einsum("bqhd,bkhd->bhqk", queries, keys)  # (b, num_heads, num_tokens, num_tokens)
        scores = scores.masked_fill(self.mask[:n, :n], -torch.inf)
        weights = torch.softmax(scores / self.head_dim ** 0.5, dim=-1)  # (b, num_heads, num_tokens, num_tokens)
        weights = self.dropout(weights)
        context = torch.einsum("bhqk,bkhd->bqhd", weights, values)  # (b, num_tokens, num_heads, head_dim)
        return self.out_proj(context.reshape(b, n, -1))  # (b, num_tokens, d_out)
