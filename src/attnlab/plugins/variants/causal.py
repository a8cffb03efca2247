"""SelfAttention_v1 with the source's causal mask (section 3.5): each token sees itself and the tokens before it."""

import torch
import torch.nn as nn

import attnlab


@attnlab.variant(
    "causal",
    description="SelfAttention_v1 with a causal mask: -inf above the diagonal before the softmax",
    expected_finding=("masked", "scaled_scores"),
    reference="reference",  # 2-D like SelfAttention_v1: compared with the unmasked original, so the mask shows
    params={"diagonal": 1},
)
class CausalSelfAttention(nn.Module):
    def __init__(self, d_in: int, d_out: int, diagonal: int = 1) -> None:
        super().__init__()
        self.diagonal = diagonal  # the first diagonal hidden: 1 hides the keys after the query, 0 the query too
        self.W_query = nn.Parameter(torch.rand(d_in, d_out))
        self.W_key = nn.Parameter(torch.rand(d_in, d_out))
        self.W_value = nn.Parameter(torch.rand(d_in, d_out))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        keys = x @ self.W_key  # (n_tokens, d_out)
        queries = x @ self.W_query  # (n_tokens, d_out)
        values = x @ self.W_value  # (n_tokens, d_out)
        attn_scores = queries @ keys.T  # (n_tokens, n_tokens)
        context_length = attn_scores.shape[0]
        mask = torch.triu(torch.ones(context_length, context_length), diagonal=self.diagonal)  # (n_tokens, n_tokens)
        attn_scores = attn_scores.masked_fill(mask.bool(), -torch.inf)  # changed: keys after the query are hidden
        attn_weights = torch.softmax(attn_scores / keys.shape[-1] ** 0.5, dim=-1)  # (n_tokens, n_tokens)
        context_vec = attn_weights @ values  # (n_tokens, d_out)
        return context_vec
