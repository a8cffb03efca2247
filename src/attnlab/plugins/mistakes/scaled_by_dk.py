"""SelfAttention_v1 dividing the scores by d_k instead of sqrt(d_k)."""

import torch
import torch.nn as nn

import attnlab


@attnlab.variant(
    "scaled_by_dk",
    description="SelfAttention_v1 scaling the scores by 1/d_k, not 1/sqrt(d_k)",
    expected_finding=("scaling", "scaled_scores"),
    multi_head="mha_scaled_by_dk",
)
class SelfAttentionScaledByDk(nn.Module):
    def __init__(self, d_in: int, d_out: int) -> None:
        super().__init__()
        self.W_query = nn.Parameter(torch.rand(d_in, d_out))
        self.W_key = nn.Parameter(torch.rand(d_in, d_out))
        self.W_value = nn.Parameter(torch.rand(d_in, d_out))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        keys = x @ self.W_key  # (n_tokens, d_out)
        queries = x @ self.W_query  # (n_tokens, d_out)
        values = x @ self.W_value  # (n_tokens, d_out)
        attn_scores = queries @ keys.T  # (n_tokens, n_tokens)
        attn_weights = torch.softmax(attn_scores / keys.shape[-1], dim=-1)  # (n_tokens, n_tokens); changed: / d_k, not / d_k ** 0.5
        context_vec = attn_weights @ values  # (n_tokens, d_out)
        return context_vec
