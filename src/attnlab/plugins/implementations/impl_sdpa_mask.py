"""MHAPyTorchSDPAWithoutFlash of the source's bonus notebook: F.scaled_dot_product_attention with
an explicit boolean mask (a buffer) instead of is_causal, which rules out the flash kernel.

Kept as published: the mask is the chapter's, True above the diagonal (the keys to hide), but
scaled_dot_product_attention reads a bool mask's True as "may attend", so each query sees only the
keys after it and the last token sees none.
"""

import torch
import torch.nn as nn

import attnlab


@attnlab.variant(
    "impl_sdpa_mask",
    description="notebook's MHAPyTorchSDPAWithoutFlash: scaled_dot_product_attention with an explicit bool mask",
)
class MHAPyTorchSDPAWithoutFlash(nn.Module):
    mask: torch.Tensor  # a buffer (register_buffer in __init__), declared so a type checker reads it as a tensor

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
        self.register_buffer("mask", torch.triu(torch.ones(context_length, context_length), diagonal=1).bool())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch_size, num_tokens, embed_dim = x.shape
        qkv = self.qkv(x)  # (b, num_tokens, 3 * d_out)
        qkv = qkv.view(batch_size, num_tokens, 3, self.num_heads, self.head_dim)  # (b, num_tokens, 3, num_heads, head_dim)
        qkv = qkv.permute(2, 0, 3, 1, 4)  # (3, b, num_heads, num_tokens, head_dim)
        queries, keys, values = qkv  # 3 times (b, num_heads, num_tokens, head_dim)
        use_dropout = 0. if not self.training else self.dropout

        if self.context_length >= num_tokens:
            attn_mask = self.mask[:num_tokens, :num_tokens]  # (num_tokens, num_tokens)
        else:
            attn_mask = self.mask[:self.context_length, :self.context_length]

        context_vec: torch.Tensor = nn.functional.scaled_dot_product_attention(
            queries, keys, values, attn_mask=attn_mask, dropout_p=use_dropout, is_causal=False)  # (b, num_heads, num_tokens, head_dim)

        context_vec = context_vec.transpose(1, 2).contiguous().view(batch_size, num_tokens, self.d_out)  # (b, num_tokens, d_out)
        context_vec = self.proj(context_vec)  # (b, num_tokens, d_out)
        return context_vec
