"""MHAPyTorchClass of the source's bonus notebook: nn.MultiheadAttention (embed_dim = d_out, so
d_in must equal d_out) followed by one more Linear, `proj`; with and without need_weights."""

import torch
import torch.nn as nn

import attnlab


@attnlab.variant("impl_torch_mha", params={"need_weights": True},
                 description="notebook's MHAPyTorchClass: nn.MultiheadAttention, then a second projection proj")
@attnlab.variant("impl_torch_mha_no_weights", params={"need_weights": False},
                 description="notebook's MHAPyTorchClass with need_weights=False (the fused kernel where it applies)")
class MHAPyTorchClass(nn.Module):
    mask: torch.Tensor  # a buffer (register_buffer in __init__), declared so a type checker reads it as a tensor

    def __init__(self, d_in: int, d_out: int, num_heads: int, context_length: int, dropout: float = 0.0,
                 qkv_bias: bool = False, need_weights: bool = True) -> None:
        super().__init__()
        self.context_length = context_length
        self.multihead_attn = nn.MultiheadAttention(
            embed_dim=d_out,
            num_heads=num_heads,
            dropout=dropout,
            bias=qkv_bias,
            add_bias_kv=qkv_bias,
            batch_first=True,
        )
        self.need_weights = need_weights
        self.proj = nn.Linear(d_out, d_out)
        self.register_buffer("mask", torch.triu(torch.ones(context_length, context_length), diagonal=1).bool())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch_size, num_tokens, _ = x.shape
        if self.context_length >= num_tokens:
            attn_mask = self.mask[:num_tokens, :num_tokens]  # (num_tokens, num_tokens), True = hidden
        else:
            attn_mask = self.mask[:self.context_length, :self.context_length]
        attn_output, _ = self.multihead_attn(
            x, x, x, attn_mask=attn_mask, need_weights=self.need_weights
        )  # (b, num_tokens, d_out), after nn.MultiheadAttention's own out_proj
        output: torch.Tensor = self.proj(attn_output)  # (b, num_tokens, d_out)
        return output
