"""Queries scaled per column by a learned vector (TimesFM's per-dimension scaling, then scaling=1.0
passed to the softmax): named, not a `query_source` or `scaling` error, while a mistake planted in a
copy is still found at its stage."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

import attnlab
from attnlab.diagnosis.recognisers.query_scale import column_factors
from tests.modules.hf_runs import SIZES, assert_runs_clean, errors, softmax_over_queries

pytest.importorskip("transformers")

from transformers.models.timesfm.modeling_timesfm import TimesFmAttention  # noqa: E402


def test_column_factors_fit_a_per_column_scale_and_nothing_else():
    g = torch.Generator().manual_seed(0)
    ref = torch.randn(2, 4, 8, 16, generator=g)
    factors = torch.rand(16, generator=g) + 0.1
    assert torch.allclose(column_factors(ref * factors, ref, 1e-6), factors.double(), rtol=1e-5)
    assert column_factors(ref, ref, 1e-6) is None  # unchanged
    assert column_factors(torch.roll(ref * factors, 1, dims=2), ref, 1e-6) is None  # another token's
    assert column_factors(-ref * factors, ref, 1e-6) is None  # a sign is not a scale


def _config():
    from transformers import TimesFmConfig

    config = TimesFmConfig(hidden_size=64, intermediate_size=64, num_attention_heads=4, head_dim=16, num_hidden_layers=1)
    config._attn_implementation = "eager"
    return config


class TimesFmQueriesFromKeys(TimesFmAttention):
    """Planted: the queries computed with the key projection (k_proj called where q_proj is)."""

    def forward(self, *args, **kwargs):
        self.q_proj.forward = self.k_proj.forward
        try:
            return super().forward(*args, **kwargs)
        finally:
            del self.q_proj.forward


class TimesFmSoftmaxOverQueries(TimesFmAttention):
    """Planted: the softmax normalises each key's column (over the queries) instead of each query's row."""

    def forward(self, *args, **kwargs):
        with softmax_over_queries():
            return super().forward(*args, **kwargs)


def _plain(attention: TimesFmAttention, x: torch.Tensor) -> torch.Tensor:
    """TimesFM's attention in plain torch: queries times softplus(scaling) * log2(e) / sqrt(head_dim)
    per column, scores unscaled after that, causal softmax, heads merged, output projection."""
    b, n, _ = x.shape
    heads, hd = attention.num_heads, attention.head_dim
    q, k, v = (proj(x).view(b, n, heads, hd).transpose(1, 2) for proj in (attention.q_proj, attention.k_proj,
                                                                          attention.v_proj))
    q = q * (nn.functional.softplus(attention.scaling) * 1.442695041 / math.sqrt(hd))  # (b, heads, n, hd)
    attn_scores = q @ k.transpose(-2, -1)  # (b, heads, n, n)
    attn_scores = attn_scores.masked_fill(torch.ones(n, n, dtype=torch.bool).triu(1), float("-inf"))
    context_vec = (attn_scores.softmax(dim=-1) @ v).transpose(1, 2).reshape(b, n, heads * hd)
    return attention.o_proj(context_vec)  # (b, n, d_out)


def test_the_library_class_and_the_planted_copies_in_plain_torch():
    """Independently of attnlab: the library's class is the plain computation above with a learned
    per-column query scale and no other; each planted copy computes other outputs."""
    config = _config()
    g = torch.Generator().manual_seed(0)
    x = torch.rand(2, 8, 64, generator=g)
    mask = torch.zeros(8, 8).masked_fill(torch.ones(8, 8, dtype=torch.bool).triu(1), float("-inf"))[None, None]
    original = TimesFmAttention(config, layer_idx=0).eval()
    with torch.no_grad():
        original.scaling.copy_(torch.randn(16, generator=g))  # a different factor per column
        out = original(x, attention_mask=mask)[0]
        assert torch.allclose(out, _plain(original, x), atol=1e-5)
        for planted in (TimesFmQueriesFromKeys(config, layer_idx=0), TimesFmSoftmaxOverQueries(config, layer_idx=0)):
            planted.load_state_dict(original.state_dict())
            assert (planted.eval()(x, attention_mask=mask)[0] - out).abs().max() > 1e-3


@pytest.mark.slow
@pytest.mark.parametrize(("model", "declared"), [
    ("timesfm", ("query_scale", "queries")),
    ("timesfm2_5", ("declared_scale", "scaled_scores")),  # its per-column scale after QK-norm: qk_norm names it
])
def test_timesfm_per_dimension_query_scale_is_named_not_a_query_source(model, declared):
    assert_runs_clean(model, declared)


@pytest.mark.slow
@pytest.mark.parametrize(("planted", "expected"), [
    (TimesFmQueriesFromKeys, ("query_source", "queries")),
    (TimesFmSoftmaxOverQueries, ("softmax_axis", "weights")),
])
def test_a_mistake_planted_in_a_timesfm_copy_is_still_found(planted, expected):
    result = attnlab.run(planted, overrides=SIZES)
    assert expected in errors(result), [f.message for f in result.findings]
