"""SelfAttention_v1 scaling the queries by 1/d_k before the score product, not by 1/sqrt(d_k)."""

import torch
import torch.nn as nn

import attnlab


@attnlab.variant(
    "prescaled_by_dk",
    description="SelfAttention_v1 with the queries pre-scaled by 1/d_k (not 1/sqrt(d_k)) and no scaling after",
    expected_finding=("scaling", "scaled_scores"),
)
class SelfAttentionPrescaledByDk(nn.Module):
    def __init__(self, d_in: int, d_out: int) -> None:
        super().__init__()
        self.W_query = nn.Parameter(torch.rand(d_in, d_out))
        self.W_key = nn.Parameter(torch.rand(d_in, d_out))
        self.W_value = nn.Parameter(torch.rand(d_in, d_out))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        keys = x @ self.W_key  # (n_tokens, d_out)
        queries = (x @ self.W_query) / keys.shape[-1]  # (n_tokens, d_out); changed: pre-scaled by 1/d_k, not 1/d_k ** 0.5
        values = x @ self.W_value  # (n_tokens, d_out)
        attn_scores = queries @ keys.T  # (n_tokens, n_tokens), already scaled
        attn_weights = torch.softmax(attn_scores, dim=-1)  # (n_tokens, n_tokens)
        context_vec = attn_weights @ values  # (n_tokens, d_out)
        return context_vec
