"""alibi: the source's MultiHeadAttention with ALiBi: a per-head linear penalty on the query-key distance, no position embeddings."""

import math

import torch
import torch.nn as nn

import attnlab


def alibi_slopes(num_heads: int) -> list[float]:
    """The published slopes (Press et al., 2022): a geometric sequence starting at 2 ** (-8 / n) for
    n heads a power of two; otherwise those of the nearest power below plus every other of twice it."""
    def geometric(n: int) -> list[float]:
        start = 2 ** (-8 / n)
        return [start ** (i + 1) for i in range(n)]

    if math.log2(num_heads).is_integer():
        return geometric(num_heads)
    closest = 2 ** math.floor(math.log2(num_heads))
    return geometric(closest) + alibi_slopes(2 * closest)[0::2][: num_heads - closest]


@attnlab.variant(
    "alibi",
    expected_finding=("position_bias", "scaled_scores"),
    observable={"n_tokens": 3},  # a distance bias is told from a bug on 3 tokens or more
    description="MultiHeadAttention with ALiBi: softmax input minus slope_h * (query - key distance), published slopes",
)
class ALiBiMultiHeadAttention(nn.Module):
    # buffers (register_buffer in __init__), declared so a type checker reads them as tensors
    mask: torch.Tensor
    alibi_bias: torch.Tensor

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
        self.dropout = nn.Dropout(dropout)
        self.register_buffer("mask", torch.triu(torch.ones(context_length, context_length), diagonal=1))
        positions = torch.arange(context_length)
        distance = (positions[:, None] - positions[None, :]).float()  # (context_length, context_length)
        slopes = torch.tensor(alibi_slopes(num_heads))  # (num_heads,)
        self.register_buffer("alibi_bias", -slopes[:, None, None] * distance)  # (num_heads, context_length, context_length)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, num_tokens, d_in = x.shape  # (b, num_tokens, d_in)
        keys = self.W_key(x).view(b, num_tokens, self.num_heads, self.head_dim).transpose(1, 2)  # (b, num_heads, num_tokens, head_dim)
        queries = self.W_query(x).view(b, num_tokens, self.num_heads, self.head_dim).transpose(1, 2)  # (b, num_heads, num_tokens, head_dim)
        values = self.W_value(x).view(b, num_tokens, self.num_heads, self.head_dim).transpose(1, 2)  # (b, num_heads, num_tokens, head_dim)

        attn_scores = queries @ keys.transpose(2, 3)  # (b, num_heads, num_tokens, num_tokens)
        attn_scores.masked_fill_(self.mask.bool()[:num_tokens, :num_tokens], -torch.inf)
        bias = self.alibi_bias[:, :num_tokens, :num_tokens]  # (num_heads, num_tokens, num_tokens)
        # changed: the distance penalty is added to the scaled scores
        attn_weights = torch.softmax(attn_scores / keys.shape[-1] ** 0.5 + bias, dim=-1)  # (b, num_heads, num_tokens, num_tokens)
        attn_weights = self.dropout(attn_weights)  # (b, num_heads, num_tokens, num_tokens)

        context_vec: torch.Tensor = (attn_weights @ values).transpose(1, 2).reshape(b, num_tokens, self.d_out)  # (b, num_tokens, d_out)
        context_vec = self.out_proj(context_vec)  # (b, num_tokens, d_out)
        return context_vec
