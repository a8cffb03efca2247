"""SelfAttention_v1 computing the values with W_key."""

import torch
import torch.nn as nn

import attnlab


@attnlab.variant(
    "values_from_key",
    description="SelfAttention_v1 with values = x @ W_key: weights right, context wrong",
    expected_finding=("value_path", "values"),
)
class SelfAttentionValuesFromKey(nn.Module):
    def __init__(self, d_in: int, d_out: int) -> None:
        super().__init__()
        self.W_query = nn.Parameter(torch.rand(d_in, d_out))
        self.W_key = nn.Parameter(torch.rand(d_in, d_out))
        self.W_value = nn.Parameter(torch.rand(d_in, d_out))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        keys = x @ self.W_key  # (n_tokens, d_out)
        queries = x @ self.W_query  # (n_tokens, d_out)
        values = x @ self.W_key  # (n_tokens, d_out); changed: W_key, not W_value
        attn_scores = queries @ keys.T  # (n_tokens, n_tokens)
        attn_weights = torch.softmax(attn_scores / keys.shape[-1] ** 0.5, dim=-1)  # (n_tokens, n_tokens)
        context_vec = attn_weights @ values  # (n_tokens, d_out)
        return context_vec
