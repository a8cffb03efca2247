"""SelfAttention_v1 normalising the scores by their row sums instead of a softmax."""

import torch
import torch.nn as nn

import attnlab


@attnlab.variant(
    "plain_normalisation",
    description="SelfAttention_v1 with attn_scores / row sum instead of softmax",
    expected_finding=("not_softmax", "weights"),
)
class SelfAttentionPlainNormalisation(nn.Module):
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
        attn_weights = attn_scores / attn_scores.sum(dim=-1, keepdim=True)  # (n_tokens, n_tokens); changed: row sum, not softmax
        context_vec = attn_weights @ values  # (n_tokens, d_out)
        return context_vec
