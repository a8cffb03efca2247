"""An attention class whose output projection is a helper class named only as a default argument
(open_clip's `proj_layer=LinearFp32` style): the outer class is the variant."""

import torch
from torch import nn


class LinearFp32(nn.Linear):
    def forward(self, x):
        return super().forward(x.float()).to(x.dtype)


class NormedAttention(nn.Module):
    def __init__(self, d_in, d_out, num_heads, proj_layer=LinearFp32):
        super().__init__()
        self.num_heads, self.head_dim = num_heads, d_out // num_heads
        self.W_query = nn.Linear(d_in, d_out, bias=False)
        self.W_key = nn.Linear(d_in, d_out, bias=False)
        self.W_value = nn.Linear(d_in, d_out, bias=False)
        self.out_proj = proj_layer(d_out, d_out)

    def forward(self, x):
        b, t, _ = x.shape
        queries, keys, values = (proj(x).view(b, t, self.num_heads, self.head_dim).transpose(1, 2)
                                 for proj in (self.W_query, self.W_key, self.W_value))  # (B, nh, T, hs)
        attn_scores = queries @ keys.transpose(2, 3)  # (B, nh, T, T)
        causal = torch.triu(torch.ones(t, t, dtype=torch.bool), diagonal=1)
        attn_weights = torch.softmax(attn_scores.masked_fill(causal, -torch.inf) / self.head_dim ** 0.5, dim=-1)
        context_vec = (attn_weights @ values).transpose(1, 2).reshape(b, t, -1)  # (B, T, d_out)
        return self.out_proj(context_vec)
