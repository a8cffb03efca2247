"""linear_attention: the source's MultiHeadAttention with linear attention (Katharopoulos et al., 2020): a feature map instead of the softmax.

The weights of query i are phi(q_i) . phi(k_j) / sum over j' <= i of phi(q_i) . phi(k_j'), with
phi = elu + 1; causal through running sums over the tokens, so no (num_tokens x num_tokens)
matrix is ever made. attnlab cannot see a stage that is never made: queries, keys, values and
the context are marked with attnlab.tap.
"""

import torch
import torch.nn as nn
import torch.nn.functional as F

import attnlab
from attnlab.capture.recorder import tap


@attnlab.variant(
    "linear_attention",
    description="MultiHeadAttention with elu+1 feature maps instead of the softmax, causal through cumulative sums",
    expected_finding=("not_softmax", "weights"),
)
class LinearAttention(nn.Module):
    def __init__(self, d_in: int, d_out: int, context_length: int, dropout: float, num_heads: int,
                 qkv_bias: bool = False) -> None:
        super().__init__()
        assert d_out % num_heads == 0, "d_out must be divisible by num_heads"
        self.d_out = d_out
        self.num_heads = num_heads
        self.head_dim = d_out // num_heads
        self.W_query = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_key = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_value = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.out_proj = nn.Linear(d_out, d_out)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, num_tokens, d_in = x.shape  # (b, num_tokens, d_in)
        keys = tap("keys", self.W_key(x).view(b, num_tokens, self.num_heads, self.head_dim).transpose(1, 2))  # (b, num_heads, num_tokens, head_dim)
        queries = tap("queries", self.W_query(x).view(b, num_tokens, self.num_heads, self.head_dim).transpose(1, 2))  # (b, num_heads, num_tokens, head_dim)
        values = tap("values", self.W_value(x).view(b, num_tokens, self.num_heads, self.head_dim).transpose(1, 2))  # (b, num_heads, num_tokens, head_dim)

        # changed: no softmax; a positive feature map, and running sums over the tokens for the causal mask
        phi_q, phi_k = F.elu(queries) + 1, F.elu(keys) + 1  # (b, num_heads, num_tokens, head_dim) each
        kv = torch.cumsum(phi_k.unsqueeze(-1) * values.unsqueeze(-2), dim=2)  # (b, num_heads, num_tokens, head_dim, head_dim)
        k_sum = torch.cumsum(phi_k, dim=2)  # (b, num_heads, num_tokens, head_dim)
        numerator = (phi_q.unsqueeze(-2) @ kv).squeeze(-2)  # (b, num_heads, num_tokens, head_dim)
        denominator = (phi_q * k_sum).sum(dim=-1, keepdim=True)  # (b, num_heads, num_tokens, 1)
        context_vec: torch.Tensor = tap("context", numerator / denominator)  # (b, num_heads, num_tokens, head_dim)

        context_vec = context_vec.transpose(1, 2).reshape(b, num_tokens, self.d_out)  # (b, num_tokens, d_out)
        context_vec = self.out_proj(context_vec)  # (b, num_tokens, d_out)
        return context_vec
