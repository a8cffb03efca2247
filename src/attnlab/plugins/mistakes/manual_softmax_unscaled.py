"""SelfAttention_v1 with a hand-written softmax that forgets the 1/sqrt(d_k) scaling."""

import torch
import torch.nn as nn

import attnlab


@attnlab.variant(
    "manual_softmax_unscaled",
    description="SelfAttention_v1 with a hand-written softmax (exp / row sum) of the unscaled scores",
    expected_finding=("scaling", "scaled_scores"),
)
class SelfAttentionManualSoftmaxUnscaled(nn.Module):
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
        row_max = attn_scores.max(dim=-1, keepdim=True).values  # (n_tokens, 1)
        exp_scores = torch.exp(attn_scores - row_max)  # (n_tokens, n_tokens); changed: no / keys.shape[-1] ** 0.5
        attn_weights = exp_scores / exp_scores.sum(dim=-1, keepdim=True)  # (n_tokens, n_tokens), rows sum to 1
        context_vec = attn_weights @ values  # (n_tokens, d_out)
        return context_vec
