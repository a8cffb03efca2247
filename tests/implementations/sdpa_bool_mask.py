"""Multi-head attention through F.scaled_dot_product_attention with an explicit boolean causal mask."""

import torch
import torch.nn as nn
import torch.nn.functional as F


class SDPABoolMaskAttention(nn.Module):
    def __init__(self, d_in, d_out, context_length, dropout, num_heads, qkv_bias=False):
        super().__init__()
        assert d_out % num_heads == 0, "d_out must be divisible by num_heads"
        self.num_heads, self.head_dim, self.dropout = num_heads, d_out // num_heads, dropout
        self.W_query = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_key = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_value = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.out_proj = nn.Linear(d_out, d_out)
        # SDPA's boolean mask is True where a query MAY attend: the lower triangle
        self.register_buffer("allowed", torch.tril(torch.ones(context_length, context_length)).bool())

    def forward(self, x):
        b, n, _ = x.shape
        split = lambda t: t.view(b, n, self.num_heads, self.head_dim).transpose(1, 2)  # noqa: E731
        queries = split(self.W_query(x))  # (b, num_heads, num_tokens, head_dim)
        keys = split(self.W_key(x))  # (b, num_heads, num_tokens, head_dim)
        values = split(self.W_value(x))  # (b, num_heads, num_tokens, head_dim)
        context = F.scaled_dot_product_attention(
            queries, keys, values, attn_mask=self.allowed[:n, :n],
            dropout_p=self.dropout if self.training else 0.0,
        )  # (b, num_heads, num_tokens, head_dim)
        return self.out_proj(context.transpose(1, 2).reshape(b, n, -1))  # (b, num_tokens, d_out)
