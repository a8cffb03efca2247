"""SelfAttention_v1 computing keys @ queries.T: the scores transposed."""

import torch
import torch.nn as nn

import attnlab


@attnlab.variant(
    "transposed_scores",
    description="SelfAttention_v1 with attn_scores = keys @ queries.T (the transpose)",
    expected_finding=("scores_transposed", "scores"),
)
class SelfAttentionTransposedScores(nn.Module):
    def __init__(self, d_in: int, d_out: int) -> None:
        super().__init__()
        self.W_query = nn.Parameter(torch.rand(d_in, d_out))
        self.W_key = nn.Parameter(torch.rand(d_in, d_out))
        self.W_value = nn.Parameter(torch.rand(d_in, d_out))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        keys = x @ self.W_key  # (n_tokens, d_out)
        queries = x @ self.W_query  # (n_tokens, d_out)
        values = x @ self.W_value  # (n_tokens, d_out)
        attn_scores = keys @ queries.T  # (n_tokens, n_tokens); changed: keys @ queries.T, not queries @ keys.T
        attn_weights = torch.softmax(attn_scores / keys.shape[-1] ** 0.5, dim=-1)  # (n_tokens, n_tokens)
        context_vec = attn_weights @ values  # (n_tokens, d_out)
        return context_vec
