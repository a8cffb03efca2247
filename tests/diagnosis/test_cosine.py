"""Cosine-similarity attention: unit-length queries and keys per head, a chosen temperature."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

import attnlab

SIZES = ["inputs=random", "inputs.n_tokens=8", "inputs.d_in=16", "d_out=16", "num_heads=2"]


class CosineAttention(nn.Module):
    """Causal multi-head attention on L2-normalised queries and keys, scaled by `temperature`."""

    def __init__(self, d_in, d_out, num_heads, temperature=10.0, normalise_keys=True):
        super().__init__()
        self.num_heads, self.temperature, self.normalise_keys = num_heads, temperature, normalise_keys
        self.W_query, self.W_key = nn.Linear(d_in, d_out, bias=False), nn.Linear(d_in, d_out, bias=False)
        self.W_value, self.out_proj = nn.Linear(d_in, d_out, bias=False), nn.Linear(d_out, d_out)

    def forward(self, x):
        b, t, _ = x.shape
        def split(z):
            return z.view(b, t, self.num_heads, -1).transpose(1, 2)  # (b, nh, t, hs)

        queries = F.normalize(split(self.W_query(x)), dim=-1)  # (b, nh, t, hs)
        keys = split(self.W_key(x))  # (b, nh, t, hs)
        keys = F.normalize(keys, dim=-1) if self.normalise_keys else keys
        attn_scores = queries @ keys.transpose(2, 3) * self.temperature  # (b, nh, t, t)
        mask = torch.triu(torch.ones(t, t, dtype=torch.bool), diagonal=1)
        attn_weights = torch.softmax(attn_scores.masked_fill(mask, -torch.inf), dim=-1)  # (b, nh, t, t)
        context_vec = (attn_weights @ split(self.W_value(x))).transpose(1, 2).reshape(b, t, -1)  # (b, t, d_out)
        return self.out_proj(context_vec)


def test_cosine_similarity_attention_is_named_with_its_temperature() -> None:
    result = attnlab.run(CosineAttention, overrides=[*SIZES, "+variant.params.temperature=7.5"])
    assert [(f.code, f.severity) for f in result.findings] == [("cosine_attention", "info")]
    assert "scaled by 7.5" in result.findings[0].message


def test_queries_normalised_and_keys_not_is_not_cosine_attention() -> None:
    result = attnlab.run(CosineAttention, overrides=[*SIZES, "+variant.params.normalise_keys=false"])
    codes = {(f.code, f.severity) for f in result.findings}
    assert ("cosine_attention", "info") not in codes and any(s == "error" for _, s in codes)
