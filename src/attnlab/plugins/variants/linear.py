"""SelfAttention_v2: the source's class on nn.Linear layers (ch. 3)."""

import torch
import torch.nn as nn

import attnlab


@attnlab.variant(
    "linear",
    description="SelfAttention_v2: projections as nn.Linear layers (qkv_bias=true adds their biases)",
)
class SelfAttention_v2(nn.Module):
    def __init__(self, d_in: int, d_out: int, qkv_bias: bool = False) -> None:
        super().__init__()
        self.W_query = nn.Linear(d_in, d_out, bias=qkv_bias)  # changed: nn.Linear, weight is (d_out, d_in)
        self.W_key = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_value = nn.Linear(d_in, d_out, bias=qkv_bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        keys = self.W_key(x)  # (n_tokens, d_out)
        queries = self.W_query(x)  # (n_tokens, d_out)
        values = self.W_value(x)  # (n_tokens, d_out)
        attn_scores = queries @ keys.T  # (n_tokens, n_tokens)
        attn_weights = torch.softmax(attn_scores / keys.shape[-1] ** 0.5, dim=-1)  # (n_tokens, n_tokens)
        context_vec: torch.Tensor = attn_weights @ values  # (n_tokens, d_out)
        return context_vec
