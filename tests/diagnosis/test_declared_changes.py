"""Declared changes from other libraries, written here as those libraries write them: each is named
as info with what it changes, every stage captured, never read as a wrong source or a wrong scale.

xPos (rotary with a per-position scale, as torchscale writes it), a soft clamp of the logits
(Grok's and x-transformers' `tanh(s / c) * c`), attention sinks (gpt-oss: a learned logit per
head joined to each row's softmax, dropped after it) and an output gate inside q_proj (Qwen3-Next:
each head's query and gate side by side)."""

from __future__ import annotations

import textwrap
from pathlib import Path

import numpy as np
import pytest

import attnlab
from attnlab.capture.stages import STAGES
from attnlab.model.head_patterns import head_patterns
from tests._zoo_helpers import plugin_runner

HEADER = """
import math

import torch
import torch.nn as nn
import torch.nn.functional as F


def projections(module, d_in, d_out, num_heads, q_width=None):
    module.num_heads, module.head_dim = num_heads, d_out // num_heads
    module.q_proj = nn.Linear(d_in, q_width or d_out, bias=False)
    module.k_proj = nn.Linear(d_in, d_out, bias=False)
    module.v_proj = nn.Linear(d_in, d_out, bias=False)
    module.o_proj = nn.Linear(d_out, d_out, bias=False)


def split(t, num_heads):  # (B, T, d) -> (B, nh, T, hs)
    return t.view(t.shape[0], t.shape[1], num_heads, -1).transpose(1, 2)


def merged(context_vec):  # (B, nh, T, hs) -> (B, T, d)
    return context_vec.transpose(1, 2).flatten(2)


def causal(n):
    return torch.ones(n, n, dtype=torch.bool).triu(1)
"""

PLUGINS = {
    "xpos": '''
class XPosAttention(nn.Module):
    """torchscale's xPos: rotary over interleaved pairs, queries scaled by zeta ** (t / scale_base)
    per pair, keys by its inverse, so each score decays with the query-key distance."""

    def __init__(self, d_in, d_out, context_length, dropout, num_heads, qkv_bias=False, scale_base=8.0):
        super().__init__()
        projections(self, d_in, d_out, num_heads)
        half = self.head_dim // 2
        self.register_buffer("zeta", (torch.arange(0, self.head_dim, 2) + 0.4 * self.head_dim) / (1.4 * self.head_dim))
        self.scale_base, self.inv_freq = scale_base, 1.0 / 10000 ** (torch.arange(half) / half)

    def rotate(self, x, downscale):  # (B, nh, T, hs)
        n = x.shape[-2]
        position = torch.arange(n, dtype=torch.float32)
        scale = self.zeta ** ((position - n // 2)[:, None] / self.scale_base)  # (T, hs / 2)
        scale = 1 / scale if downscale else scale
        angle = position[:, None] * self.inv_freq  # (T, hs / 2)
        sin, cos = (t.repeat_interleave(2, dim=-1) for t in (angle.sin() * scale, angle.cos() * scale))
        x1, x2 = x[..., ::2], x[..., 1::2]
        rotated = torch.stack((-x2, x1), dim=-1).flatten(-2)
        return x * cos + rotated * sin

    def forward(self, x):
        q, k, v = (split(p(x), self.num_heads) for p in (self.q_proj, self.k_proj, self.v_proj))
        q, k = self.rotate(q, False), self.rotate(k, True)
        attn_scores = (q @ k.transpose(-2, -1)) / math.sqrt(self.head_dim)
        attn_weights = attn_scores.masked_fill(causal(x.shape[1]), float("-inf")).softmax(dim=-1)
        return self.o_proj(merged(attn_weights @ v))
''',
    "soft_clamp": '''
class SoftClampAttention(nn.Module):
    """Grok-1 / x-transformers: the logits soft-clamped, tanh(s / c) * c, before the mask."""

    def __init__(self, d_in, d_out, context_length, dropout, num_heads, qkv_bias=False, cap=0.5):
        super().__init__()
        projections(self, d_in, d_out, num_heads)
        self.cap = cap

    def forward(self, x):
        q, k, v = (split(p(x), self.num_heads) for p in (self.q_proj, self.k_proj, self.v_proj))
        attn_scores = torch.einsum("bhid,bhjd->bhij", q, k) * self.head_dim ** -0.5
        attn_scores = (attn_scores / self.cap).tanh() * self.cap
        attn_scores = attn_scores.masked_fill(causal(x.shape[1]), -torch.finfo(attn_scores.dtype).max)
        attn_weights = F.softmax(attn_scores, dim=-1)
        return self.o_proj(merged(torch.einsum("bhij,bhjd->bhid", attn_weights, v)))
''',
    "sinks": '''
class SinkAttention(nn.Module):
    """gpt-oss: a learned logit per head joins each row's softmax as one more column, dropped after it."""

    def __init__(self, d_in, d_out, context_length, dropout, num_heads, qkv_bias=False):
        super().__init__()
        projections(self, d_in, d_out, num_heads)
        self.sinks = nn.Parameter(torch.linspace(-1.0, 2.0, num_heads))

    def forward(self, x):
        q, k, v = (split(p(x), self.num_heads) for p in (self.q_proj, self.k_proj, self.v_proj))
        b, nh, n, _ = q.shape
        attn_scores = torch.matmul(q, k.transpose(2, 3)) * self.head_dim ** -0.5
        attn_scores = attn_scores + torch.zeros(n, n).masked_fill(causal(n), float("-inf"))
        sinks = self.sinks.reshape(1, -1, 1, 1).expand(b, -1, n, -1)
        combined = torch.cat([attn_scores, sinks], dim=-1)
        combined = combined - combined.max(dim=-1, keepdim=True).values
        probs = F.softmax(combined, dim=-1)
        attn_weights = probs[..., :-1]  # the sink dropped
        return self.o_proj(merged(torch.matmul(attn_weights, v)))
''',
    "gated_q_proj": '''
class GatedAttention(nn.Module):
    """Qwen3-Next: q_proj holds each head's query and its output gate side by side; the context is
    multiplied by sigmoid(gate) before o_proj."""

    def __init__(self, d_in, d_out, context_length, dropout, num_heads, qkv_bias=False):
        super().__init__()
        projections(self, d_in, d_out, num_heads, q_width=2 * d_out)

    def forward(self, x):
        b, n, _ = x.shape
        q, gate = torch.chunk(self.q_proj(x).view(b, n, self.num_heads, 2 * self.head_dim), 2, dim=-1)
        gate = gate.reshape(b, n, -1)
        q = q.transpose(1, 2)  # (B, nh, T, hs)
        k, v = split(self.k_proj(x), self.num_heads), split(self.v_proj(x), self.num_heads)
        attn_scores = q @ k.transpose(2, 3) * self.head_dim ** -0.5
        attn_weights = attn_scores.masked_fill(causal(n), float("-inf")).softmax(dim=-1)
        context_vec = (attn_weights @ v).transpose(1, 2).reshape(b, n, -1)
        return self.o_proj(context_vec * torch.sigmoid(gate))
''',
}

SIZES = dict(num_heads=2, d_out=16, inputs="random")
TOKENS = ["inputs.n_tokens=8", "inputs.d_in=6"]


@pytest.fixture
def declared(tmp_path: Path, use_plugins):
    return plugin_runner(tmp_path / "declared", PLUGINS, HEADER, use_plugins, TOKENS, **SIZES)


def codes(result) -> list[tuple[str, str]]:
    return [(f.code, f.severity) for f in result.findings]


def captured_stages(name: str) -> set[str]:
    """The stages a capture finds in the class on its own (no tap, no help)."""
    import torch

    from attnlab.capture.recorder import capture

    namespace: dict = {}
    exec(HEADER + textwrap.dedent(PLUGINS[name]), namespace)  # noqa: S102 - the test's own class text
    cls = next(v for k, v in namespace.items() if k.endswith("Attention") and isinstance(v, type))
    torch.manual_seed(0)
    return set(capture(cls(6, 16, 8, 0.0, 2).eval(), torch.randn(2, 8, 6)).stages)


@pytest.mark.parametrize("name", list(PLUGINS))
def test_every_stage_is_captured(name):
    assert captured_stages(name) == set(STAGES) - {"weights_applied"}


@pytest.mark.slow
def test_xpos_is_named_not_a_query_source(declared):
    result = declared("xpos")
    assert codes(result) == [("xpos", "info")], [f.message for f in result.findings]
    message = result.findings[0].message
    assert "interleaved pairs" in message and "theta (base) 10000" in message and "by its inverse" in message


@pytest.mark.parametrize("cap", ["0.5", "2.0"])
def test_a_soft_clamp_of_the_logits_is_named_with_its_cap(declared, cap):
    result = declared("soft_clamp", f"cap={cap}")
    assert codes(result) == [("softcap", "info")], [f.message for f in result.findings]
    assert f"{cap} * tanh(s / {cap})" in result.findings[0].message


def test_attention_sinks_are_named_with_their_logits(declared):
    result = declared("sinks")
    assert codes(result) == [("attention_sinks", "info")], [f.message for f in result.findings]
    assert "head 0: -1.0, head 1: 2.0" in result.findings[0].message


def test_a_gate_inside_q_proj_is_loaded_and_named(declared):
    result = declared("gated_q_proj")
    assert codes(result) == [("output_gate", "info")], [f.message for f in result.findings]
    assert "W_query (q_proj)" in result.findings[0].message


def test_head_patterns_read_weights_with_a_sink_column_without_crashing():
    """gpt-oss's weights as its eager code keeps them: one column more than the keys (the sink)."""
    rng = np.random.default_rng(0)
    logits = np.tril(rng.normal(size=(1, 2, 14, 14))) + np.triu(np.full((14, 14), -np.inf), 1)
    joined = np.concatenate([logits, np.zeros((1, 2, 14, 1))], axis=-1)  # (B, nh, T, T + 1)
    weights = np.exp(joined - joined.max(-1, keepdims=True))
    weights /= weights.sum(-1, keepdims=True)
    assert all(f.severity == "info" for f in head_patterns(weights))


def test_gpt_oss_s_own_sinks_are_named_not_a_plain_normalisation():
    """GptOssAttention's eager code: its sink column kept apart from the weights, named as info."""
    pytest.importorskip("transformers", reason="the Hugging Face class is the independent side")
    result = attnlab.run("hf:gpt_oss", overrides=["inputs=random", "inputs.n_tokens=8", "inputs.d_in=64", "d_out=64",
                                                  "num_heads=4", "attn_implementation=eager"])
    assert result.record.status == "ok", result.record.error
    assert ("attention_sinks", "info") in codes(result) and "not_softmax" not in dict(codes(result))
    assert all(severity == "info" for _, severity in codes(result))
