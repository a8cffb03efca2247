"""SelfAttention_v1 with the keys rolled by one row: token i is scored against key i-1."""

import torch
import torch.nn as nn

import attnlab


@attnlab.variant(
    "shifted_keys",
    description="SelfAttention_v1 with torch.roll(keys, 1, dims=0): keys misaligned by one token",
    expected_finding=("key_index", "keys"),
)
class SelfAttentionShiftedKeys(nn.Module):
    def __init__(self, d_in: int, d_out: int) -> None:
        super().__init__()
        self.W_query = nn.Parameter(torch.rand(d_in, d_out))
        self.W_key = nn.Parameter(torch.rand(d_in, d_out))
        self.W_value = nn.Parameter(torch.rand(d_in, d_out))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        keys = torch.roll(x @ self.W_key, shifts=1, dims=0)  # (n_tokens, d_out); changed: rolled by one row
        queries = x @ self.W_query  # (n_tokens, d_out)
        values = x @ self.W_value  # (n_tokens, d_out)
        attn_scores = queries @ keys.T  # (n_tokens, n_tokens)
        attn_weights = torch.softmax(attn_scores / keys.shape[-1] ** 0.5, dim=-1)  # (n_tokens, n_tokens)
        context_vec = attn_weights @ values  # (n_tokens, d_out)
        return context_vec
