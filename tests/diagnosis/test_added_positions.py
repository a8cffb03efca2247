"""Absolute position embeddings added before the query and key projections (DETR's), written here in
plain torch as those models write them: named as info (`added_positions`), never read as a wrong
query source; keys used as queries beside them, or an offset that follows the input, are still errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests._zoo_helpers import plugin_runner

HEADER = """
import math

import torch
import torch.nn as nn


def sine(n, d):  # (T, d): Vaswani et al.'s sine embedding of the token's place
    position = torch.arange(n, dtype=torch.float32)[:, None]
    angle = position / 10000 ** (torch.arange(0, d, 2, dtype=torch.float32) / d)
    return torch.stack((angle.sin(), angle.cos()), dim=-1).flatten(-2)[:, :d]


def projections(module, d_in, d_out, num_heads):
    module.num_heads, module.head_dim = num_heads, d_out // num_heads
    module.W_query = nn.Linear(d_in, d_out, bias=False)
    module.W_key = nn.Linear(d_in, d_out, bias=False)
    module.W_value = nn.Linear(d_in, d_out, bias=False)
    module.out_proj = nn.Linear(d_out, d_out)


def attend(module, q_in, k_in, v_in, w_query):  # w_query: the projection the queries are made with
    b, n, _ = v_in.shape
    queries, keys, values = (w(t).view(b, n, module.num_heads, module.head_dim).transpose(1, 2)
                             for w, t in ((w_query, q_in), (module.W_key, k_in), (module.W_value, v_in)))
    attn_scores = queries @ keys.transpose(2, 3)  # (b, nh, T, T): bidirectional, as DETR's encoder
    attn_weights = torch.softmax(attn_scores / math.sqrt(module.head_dim), dim=-1)
    context_vec = (attn_weights @ values).transpose(1, 2).reshape(b, n, -1)  # (b, T, d_out)
    return module.out_proj(context_vec)
"""

INIT = """
    def __init__(self, d_in, d_out, context_length, dropout, num_heads, qkv_bias=False):
        super().__init__()
        projections(self, d_in, d_out, num_heads)
"""

PLUGINS = {
    "detr_positions": """
class DetrPositions(nn.Module):""" + INIT + """
    def forward(self, x):
        pos = sine(x.shape[1], x.shape[-1])
        return attend(self, x + pos, x + pos, x, self.W_query)
""",
    "detr_keys_as_queries": """
class DetrKeysAsQueries(nn.Module):""" + INIT + """
    def forward(self, x):  # the planted mistake: the queries from W_key, beside the positions
        pos = sine(x.shape[1], x.shape[-1])
        return attend(self, x + pos, x + pos, x, self.W_key)
""",
    "detr_input_offset": """
class DetrInputOffset(nn.Module):""" + INIT + """
    def forward(self, x):  # an offset that follows the input (the previous token's row): no position's
        shifted = x + x.roll(1, dims=1)
        return attend(self, shifted, shifted, x, self.W_query)
""",
}

SIZES = dict(num_heads=2, d_out=16, inputs="random", reference="bidirectional_heads")
TOKENS = ["inputs.n_tokens=8", "inputs.d_in=16"]


@pytest.fixture
def detr(tmp_path: Path, use_plugins):
    return plugin_runner(tmp_path / "detr", PLUGINS, HEADER, use_plugins, TOKENS, **SIZES)


def codes(result) -> list[tuple[str, str, str]]:
    return [(f.code, f.stage, f.severity) for f in result.findings]


def test_the_sine_embedding_of_the_header_is_vaswani_s():
    import math

    import torch

    namespace: dict = {}
    exec(HEADER, namespace)  # noqa: S102 - the test's own class text
    pe = namespace["sine"](5, 6)
    assert pe.shape == (5, 6)
    assert float(pe[3, 2]) == pytest.approx(math.sin(3 / 10000 ** (2 / 6)))
    assert float(pe[3, 3]) == pytest.approx(math.cos(3 / 10000 ** (2 / 6)))
    assert torch.equal(pe[0, 1::2], torch.ones(3))


@pytest.mark.slow
def test_detr_s_added_positions_are_named_not_a_query_source(detr):
    result = detr("detr_positions")
    assert codes(result) == [("added_positions", "queries", "info")], [f.message for f in result.findings]


@pytest.mark.slow
def test_keys_as_queries_beside_the_positions_is_still_a_query_source(detr):
    result = detr("detr_keys_as_queries")
    found = codes(result)
    assert ("query_source", "queries", "error") in found, [f.message for f in result.findings]
    assert not any(code == "added_positions" for code, _, _ in found)


@pytest.mark.slow
def test_an_offset_that_follows_the_input_is_no_position(detr):
    result = detr("detr_input_offset")
    found = codes(result)
    assert not any(code == "added_positions" for code, _, _ in found), found
    assert any(severity == "error" for _, _, severity in found), found
