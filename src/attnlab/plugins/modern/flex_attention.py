"""flex_attention: the source's MultiHeadAttention with its attention computed by FlexAttention and a causal block mask.

FlexAttention on the CPU runs forward only, without autograd: the forward runs under
torch.no_grad().
"""

import torch
import torch.nn as nn
from torch.nn.attention.flex_attention import create_block_mask, flex_attention

import attnlab


def causal(b: torch.Tensor, h: torch.Tensor, q_idx: torch.Tensor, kv_idx: torch.Tensor) -> torch.Tensor:
    return q_idx >= kv_idx  # a query sees its own token and the ones before it


@attnlab.variant(
    "flex_attention",
    description="MultiHeadAttention through FlexAttention with a causal block mask (forward only, under no_grad)",
)
class MultiHeadAttentionFlex(nn.Module):
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

    @torch.no_grad()
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, num_tokens, d_in = x.shape  # (b, num_tokens, d_in)
        keys = self.W_key(x).view(b, num_tokens, self.num_heads, self.head_dim).transpose(1, 2)  # (b, num_heads, num_tokens, head_dim)
        queries = self.W_query(x).view(b, num_tokens, self.num_heads, self.head_dim).transpose(1, 2)  # (b, num_heads, num_tokens, head_dim)
        values = self.W_value(x).view(b, num_tokens, self.num_heads, self.head_dim).transpose(1, 2)  # (b, num_heads, num_tokens, head_dim)

        # changed: FlexAttention; a block mask cannot be sliced, so one is made for these tokens
        block_mask = create_block_mask(causal, B=None, H=None, Q_LEN=num_tokens, KV_LEN=num_tokens, device=x.device)
        context_vec: torch.Tensor = flex_attention(queries, keys, values, block_mask=block_mask)  # (b, num_heads, num_tokens, head_dim)

        context_vec = context_vec.transpose(1, 2).reshape(b, num_tokens, self.d_out)  # (b, num_tokens, d_out)
        context_vec = self.out_proj(context_vec)  # (b, num_tokens, d_out)
        return context_vec
