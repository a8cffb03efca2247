"""torch_mha: PyTorch's nn.MultiheadAttention with the source's causal mask, batch first."""

import torch
import torch.nn as nn

import attnlab


@attnlab.variant(
    "torch_mha",
    description="nn.MultiheadAttention (batch_first=True) with a causal mask; needs d_in == d_out",
)
class TorchMultiHeadAttention(nn.Module):
    mask: torch.Tensor  # a buffer (register_buffer in __init__), declared so a type checker reads it as a tensor

    def __init__(self, d_in: int, d_out: int, context_length: int, dropout: float, num_heads: int,
                 qkv_bias: bool = False, need_weights: bool = True) -> None:
        super().__init__()
        if d_in != d_out:
            # nn.MultiheadAttention projects embed_dim -> embed_dim: queries, keys and values
            # keep the input's width
            raise ValueError(f"torch_mha needs d_in == d_out (nn.MultiheadAttention's embed_dim); got d_in={d_in}, d_out={d_out}")
        self.need_weights = need_weights
        self.mha = nn.MultiheadAttention(d_out, num_heads, dropout=dropout, bias=qkv_bias, batch_first=True)
        # True where a query must not see the key: every key after the query
        self.register_buffer("mask", torch.triu(torch.ones(context_length, context_length), diagonal=1).bool())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, num_tokens, d_in = x.shape  # (b, num_tokens, d_in)
        attn_mask = self.mask[:num_tokens, :num_tokens]  # (num_tokens, num_tokens)
        context_vec: torch.Tensor  # the output; nn.MultiheadAttention also returns the weights, unused here
        context_vec, _ = self.mha(x, x, x, attn_mask=attn_mask, need_weights=self.need_weights)  # (b, num_tokens, d_out)
        return context_vec
