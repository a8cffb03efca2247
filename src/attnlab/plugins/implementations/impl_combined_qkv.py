"""MultiHeadAttentionCombinedQKV of the source's bonus notebook: one fused qkv Linear, split by position."""

import torch
import torch.nn as nn

import attnlab


@attnlab.variant(
    "impl_combined_qkv",
    description="notebook's MultiHeadAttentionCombinedQKV: one qkv Linear of 3 * d_out columns, unbound into three",
)
class MultiHeadAttentionCombinedQKV(nn.Module):
    mask: torch.Tensor  # a buffer (register_buffer in __init__), declared so a type checker reads it as a tensor

    def __init__(self, d_in: int, d_out: int, num_heads: int, context_length: int, dropout: float = 0.0,
                 qkv_bias: bool = False) -> None:
        super().__init__()
        assert d_out % num_heads == 0, "d_out is indivisible by num_heads"
        self.num_heads = num_heads
        self.context_length = context_length
        self.head_dim = d_out // num_heads
        self.qkv = nn.Linear(d_in, 3 * d_out, bias=qkv_bias)
        self.proj = nn.Linear(d_out, d_out)
        self.dropout = nn.Dropout(dropout)
        self.register_buffer("mask", torch.triu(torch.ones(context_length, context_length), diagonal=1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch_size, num_tokens, embed_dim = x.shape
        qkv = self.qkv(x)  # (b, num_tokens, 3 * d_out)
        qkv = qkv.view(batch_size, num_tokens, 3, self.num_heads, self.head_dim)  # (b, num_tokens, 3, num_heads, head_dim)
        qkv = qkv.permute(2, 0, 3, 1, 4)  # (3, b, num_heads, num_tokens, head_dim)
        queries, keys, values = qkv.unbind(0)  # 3 times (b, num_heads, num_tokens, head_dim)

        attn_scores = queries @ keys.transpose(-2, -1)  # (b, num_heads, num_tokens, num_tokens)
        attn_scores = attn_scores.masked_fill(self.mask.bool()[:num_tokens, :num_tokens], -torch.inf)
        attn_weights = torch.softmax(attn_scores / keys.shape[-1] ** 0.5, dim=-1)  # (b, num_heads, num_tokens, num_tokens)
        attn_weights = self.dropout(attn_weights)

        context_vec: torch.Tensor = attn_weights @ values  # (b, num_heads, num_tokens, head_dim)
        context_vec = context_vec.transpose(1, 2)  # (b, num_tokens, num_heads, head_dim)
        # the notebook reshapes to embed_dim, the input's width: the same as d_out only when d_in == d_out
        context_vec = context_vec.contiguous().view(batch_size, num_tokens, embed_dim)  # (b, num_tokens, d_out)
        context_vec = self.proj(context_vec)  # (b, num_tokens, d_out)
        return context_vec
