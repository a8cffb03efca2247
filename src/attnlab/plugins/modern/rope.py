"""rope: the source's MultiHeadAttention with rotary position embeddings (RoPE) on the queries and keys, as in Llama."""

import torch
import torch.nn as nn

import attnlab


def rope_angles(head_dim: int, theta: float, context_length: int) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin of position * theta ** (-2i / head_dim), for the pairs (i, i + head_dim // 2)."""
    inv_freq = 1.0 / theta ** (torch.arange(0, head_dim - 1, 2).float() / head_dim)  # (head_dim // 2,)
    angles = torch.arange(context_length).float()[:, None] * inv_freq[None, :]  # (context_length, head_dim // 2)
    angles = torch.cat([angles, angles], dim=-1)  # (context_length, 2 * (head_dim // 2))
    return torch.cos(angles), torch.sin(angles)


def rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate each pair (x_i, x_{i + head_dim // 2}) of every token by its position's angle; an odd
    head_dim's last coordinate has no partner and stays as it is (a head of width 1 is not turned)."""
    num_tokens, half = x.shape[-2], x.shape[-1] // 2
    x1, x2, rest = x[..., :half], x[..., half:2 * half], x[..., 2 * half:]  # (b, num_heads, num_tokens, ·) each
    paired = torch.cat((x1, x2), dim=-1)  # (b, num_heads, num_tokens, 2 * half)
    rotated = torch.cat((-x2, x1), dim=-1)  # (b, num_heads, num_tokens, 2 * half)
    turned = paired * cos[:num_tokens] + rotated * sin[:num_tokens]  # (b, num_heads, num_tokens, 2 * half)
    return torch.cat((turned, rest), dim=-1)  # (b, num_heads, num_tokens, head_dim)


@attnlab.variant(
    "rope",
    expected_finding=("rotary", "queries"),
    observable={"head_dim": 2, "n_tokens": 3},  # a pair to turn; the recognisers need 3 tokens
    description="MultiHeadAttention with rotary position embeddings on queries and keys (Llama's half-split pairs, theta)",
    params={"theta": 10000.0},
)
class RotaryMultiHeadAttention(nn.Module):
    # buffers (register_buffer in __init__), declared so a type checker reads them as tensors
    mask: torch.Tensor
    cos: torch.Tensor
    sin: torch.Tensor

    def __init__(self, d_in: int, d_out: int, context_length: int, dropout: float, num_heads: int,
                 qkv_bias: bool = False, theta: float = 10000.0) -> None:
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
        cos, sin = rope_angles(self.head_dim, theta, context_length)  # (context_length, head_dim) each
        self.register_buffer("cos", cos)
        self.register_buffer("sin", sin)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, num_tokens, d_in = x.shape  # (b, num_tokens, d_in)
        keys = self.W_key(x).view(b, num_tokens, self.num_heads, self.head_dim).transpose(1, 2)  # (b, num_heads, num_tokens, head_dim)
        queries = self.W_query(x).view(b, num_tokens, self.num_heads, self.head_dim).transpose(1, 2)  # (b, num_heads, num_tokens, head_dim)
        values = self.W_value(x).view(b, num_tokens, self.num_heads, self.head_dim).transpose(1, 2)  # (b, num_heads, num_tokens, head_dim)

        # changed: queries and keys rotated by their position (values are not)
        keys = rotate(keys, self.cos, self.sin)  # (b, num_heads, num_tokens, head_dim)
        queries = rotate(queries, self.cos, self.sin)  # (b, num_heads, num_tokens, head_dim)

        attn_scores = queries @ keys.transpose(2, 3)  # (b, num_heads, num_tokens, num_tokens)
        attn_scores.masked_fill_(self.mask.bool()[:num_tokens, :num_tokens], -torch.inf)
        attn_weights = torch.softmax(attn_scores / keys.shape[-1] ** 0.5, dim=-1)  # (b, num_heads, num_tokens, num_tokens)
        attn_weights = self.dropout(attn_weights)  # (b, num_heads, num_tokens, num_tokens)

        context_vec: torch.Tensor = (attn_weights @ values).transpose(1, 2).reshape(b, num_tokens, self.d_out)  # (b, num_tokens, d_out)
        context_vec = self.out_proj(context_vec)  # (b, num_tokens, d_out)
        return context_vec
