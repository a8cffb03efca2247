"""MHAPyTorchFlexAttention of the source's bonus notebook: fused qkv, then flex_attention with a
causal BlockMask built for the tokens given. On the CPU flex_attention runs without gradients only
(no backward), and it never applies dropout (the notebook comments it out)."""

import torch
import torch.nn as nn
from torch.nn.attention.flex_attention import create_block_mask, flex_attention

import attnlab


def causal(b: torch.Tensor, h: torch.Tensor, q_idx: torch.Tensor, kv_idx: torch.Tensor) -> torch.Tensor:
    return q_idx >= kv_idx


@attnlab.variant(
    "impl_flex_attention",
    description="notebook's MHAPyTorchFlexAttention: fused qkv, flex_attention with a causal BlockMask",
)
class MHAPyTorchFlexAttention(nn.Module):
    def __init__(self, d_in: int, d_out: int, num_heads: int, context_length: int, dropout: float = 0.0,
                 qkv_bias: bool = False) -> None:
        super().__init__()
        assert d_out % num_heads == 0, "d_out is indivisible by num_heads"
        self.num_heads = num_heads
        self.context_length = context_length
        self.head_dim = d_out // num_heads
        self.d_out = d_out
        self.qkv = nn.Linear(d_in, 3 * d_out, bias=qkv_bias)
        self.proj = nn.Linear(d_out, d_out)
        self.dropout = dropout

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch_size, num_tokens, embed_dim = x.shape
        qkv = self.qkv(x)  # (b, num_tokens, 3 * d_out)
        qkv = qkv.view(batch_size, num_tokens, 3, self.num_heads, self.head_dim)  # (b, num_tokens, 3, num_heads, head_dim)
        qkv = qkv.permute(2, 0, 3, 1, 4)  # (3, b, num_heads, num_tokens, head_dim)
        queries, keys, values = qkv  # 3 times (b, num_heads, num_tokens, head_dim)

        attn_mask = create_block_mask(causal, B=None, H=None, Q_LEN=num_tokens, KV_LEN=num_tokens, device=x.device)
        context_vec: torch.Tensor = flex_attention(queries, keys, values, block_mask=attn_mask)  # (b, num_heads, num_tokens, head_dim)

        context_vec = context_vec.transpose(1, 2).contiguous().view(batch_size, num_tokens, self.d_out)  # (b, num_tokens, d_out)
        context_vec = self.proj(context_vec)  # (b, num_tokens, d_out)
        return context_vec
