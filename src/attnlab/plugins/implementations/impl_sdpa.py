"""MHAPyTorchScaledDotProduct of the source's bonus notebook: fused qkv, then
F.scaled_dot_product_attention with is_causal=True (the flash kernel where the device has one)."""

import torch
import torch.nn as nn

import attnlab


@attnlab.variant(
    "impl_sdpa",
    description="notebook's MHAPyTorchScaledDotProduct: fused qkv, scaled_dot_product_attention(is_causal=True)",
)
class MHAPyTorchScaledDotProduct(nn.Module):
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
        use_dropout = 0. if not self.training else self.dropout

        context_vec: torch.Tensor = nn.functional.scaled_dot_product_attention(
            queries, keys, values, attn_mask=None, dropout_p=use_dropout, is_causal=True)  # (b, num_heads, num_tokens, head_dim)

        context_vec = context_vec.transpose(1, 2).contiguous().view(batch_size, num_tokens, self.d_out)  # (b, num_tokens, d_out)
        context_vec = self.proj(context_vec)  # (b, num_tokens, d_out)
        return context_vec
