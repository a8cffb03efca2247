"""sdpa: the source's MultiHeadAttention with its attention computed by F.scaled_dot_product_attention."""

import torch
import torch.nn as nn
import torch.nn.functional as F

import attnlab


@attnlab.variant(
    "sdpa",
    description="MultiHeadAttention through F.scaled_dot_product_attention(is_causal=True): the same numbers, one kernel",
)
class MultiHeadAttentionSDPA(nn.Module):
    def __init__(self, d_in: int, d_out: int, context_length: int, dropout: float, num_heads: int,
                 qkv_bias: bool = False) -> None:
        super().__init__()
        assert d_out % num_heads == 0, "d_out must be divisible by num_heads"
        self.d_out = d_out
        self.num_heads = num_heads
        self.head_dim = d_out // num_heads
        self.W_query = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_key = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_value = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.out_proj = nn.Linear(d_out, d_out)
        self.dropout = dropout

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, num_tokens, d_in = x.shape  # (b, num_tokens, d_in)
        keys = self.W_key(x).view(b, num_tokens, self.num_heads, self.head_dim).transpose(1, 2)  # (b, num_heads, num_tokens, head_dim)
        queries = self.W_query(x).view(b, num_tokens, self.num_heads, self.head_dim).transpose(1, 2)  # (b, num_heads, num_tokens, head_dim)
        values = self.W_value(x).view(b, num_tokens, self.num_heads, self.head_dim).transpose(1, 2)  # (b, num_heads, num_tokens, head_dim)

        # changed: mask, scaling, softmax, dropout and the product with the values in one kernel
        context_vec: torch.Tensor = F.scaled_dot_product_attention(
            queries, keys, values, dropout_p=self.dropout if self.training else 0.0, is_causal=True
        )  # (b, num_heads, num_tokens, head_dim)

        context_vec = context_vec.transpose(1, 2).reshape(b, num_tokens, self.d_out)  # (b, num_tokens, d_out)
        context_vec = self.out_proj(context_vec)  # (b, num_tokens, d_out)
        return context_vec
