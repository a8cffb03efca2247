"""SelfAttention_v1 with the softmax over the queries (dim 0) instead of the keys."""

import torch
import torch.nn as nn

import attnlab


@attnlab.variant(
    "wrong_softmax_axis",
    description="SelfAttention_v1 with softmax over dim 0: columns sum to 1, rows do not",
    expected_finding=("softmax_axis", "weights"),
    multi_head="mha_softmax_query_axis",
)
class SelfAttentionWrongSoftmaxAxis(nn.Module):
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
        attn_weights = torch.softmax(attn_scores / keys.shape[-1] ** 0.5, dim=0)  # changed: dim=0, not dim=-1
        context_vec = attn_weights @ values  # (n_tokens, d_out)
        return context_vec
