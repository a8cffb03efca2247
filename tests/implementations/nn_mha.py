"""nn.MultiheadAttention with a causal mask, asked for its weights and not (two variants)."""

import torch
import torch.nn as nn

import attnlab


@attnlab.variant("nn_mha_need_weights", description="nn.MultiheadAttention, need_weights=True", params={"need_weights": True})
@attnlab.variant("nn_mha_no_weights", description="nn.MultiheadAttention, need_weights=False", params={"need_weights": False})
class NNMultiheadAttention(nn.Module):
    def __init__(self, d_in, d_out, context_length, dropout, num_heads, qkv_bias=False, need_weights=True):
        super().__init__()
        assert d_in == d_out, "nn.MultiheadAttention keeps the input's width: d_in must equal d_out"
        self.need_weights = need_weights
        self.attn = nn.MultiheadAttention(d_out, num_heads, dropout=dropout, bias=qkv_bias, batch_first=True)
        self.register_buffer("mask", torch.triu(torch.ones(context_length, context_length), diagonal=1).bool())

    def forward(self, x):
        n = x.shape[1]
        out, _ = self.attn(x, x, x, attn_mask=self.mask[:n, :n], need_weights=self.need_weights)
        return out  # (b, num_tokens, d_out)
