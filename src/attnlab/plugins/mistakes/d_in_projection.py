"""SelfAttention_v1 with a (d_in, d_in) value matrix: context has d_in columns."""

import torch
import torch.nn as nn

import attnlab


@attnlab.variant(
    "d_in_projection",
    description="SelfAttention_v1 with W_value of shape (d_in, d_in): context has d_in columns",
    expected_finding=("shape_projection", "values"),
    observable={"|d_in - d_out|": 1},  # where d_in equals d_out a (d_in, d_in) matrix is the right shape
)
class SelfAttentionDInProjection(nn.Module):
    def __init__(self, d_in: int, d_out: int) -> None:
        super().__init__()
        self.W_query = nn.Parameter(torch.rand(d_in, d_out))
        self.W_key = nn.Parameter(torch.rand(d_in, d_out))
        self.W_value = nn.Parameter(torch.rand(d_in, d_in))  # changed: (d_in, d_in), not (d_in, d_out)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        keys = x @ self.W_key  # (n_tokens, d_out)
        queries = x @ self.W_query  # (n_tokens, d_out)
        values = x @ self.W_value  # (n_tokens, d_in)
        attn_scores = queries @ keys.T  # (n_tokens, n_tokens)
        attn_weights = torch.softmax(attn_scores / keys.shape[-1] ** 0.5, dim=-1)  # (n_tokens, n_tokens)
        context_vec = attn_weights @ values  # (n_tokens, d_in)
        return context_vec
