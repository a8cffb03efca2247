"""The source's SelfAttention_v1 (the reference every variant is compared against).

The source's compact self-attention class of chapter 3, verbatim; its first docstring line is
its `--help` description.
"""

import torch
import torch.nn as nn

import attnlab


@attnlab.variant(multi_head="multi_head_attention")  # its multi-head counterpart: the book's MultiHeadAttention
class SelfAttention_v1(nn.Module):
    """The source's SelfAttention_v1 (the reference every variant is compared against)."""

    def __init__(self, d_in: int, d_out: int) -> None:
        super().__init__()
        self.W_query = nn.Parameter(torch.rand(d_in, d_out))
        self.W_key = nn.Parameter(torch.rand(d_in, d_out))
        self.W_value = nn.Parameter(torch.rand(d_in, d_out))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        keys = x @ self.W_key  # (n_tokens, d_out)
        queries = x @ self.W_query  # (n_tokens, d_out)
        values = x @ self.W_value  # (n_tokens, d_out)
        attn_scores = queries @ keys.T  # omega, (n_tokens, n_tokens)
        attn_weights = torch.softmax(attn_scores / keys.shape[-1] ** 0.5, dim=-1)  # (n_tokens, n_tokens)
        context_vec = attn_weights @ values  # (n_tokens, d_out)
        return context_vec
