"""dropout_unscaled: a hand-written dropout that zeroes weights without multiplying the rest by
1/(1 - p) (section 3.5.2), planted in the source's CausalAttention; the source's own dropout and a
hand-written one that rescales are not it."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

import attnlab

OFF = {"tensorboard": False, "table": False, "html": False}

_CAUSAL_ATTENTION = '''
import torch
import torch.nn as nn

import attnlab


@attnlab.variant("NAME")
class CausalAttention(nn.Module):
    def __init__(self, d_in, d_out, context_length, dropout, qkv_bias=False):
        super().__init__()
        self.W_query = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_key = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_value = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.p = dropout
        self.register_buffer("mask", torch.triu(torch.ones(context_length, context_length), diagonal=1))

    def forward(self, x):
        b, num_tokens, d_in = x.shape
        keys = self.W_key(x)  # (b, num_tokens, d_out)
        queries = self.W_query(x)  # (b, num_tokens, d_out)
        values = self.W_value(x)  # (b, num_tokens, d_out)
        attn_scores = queries @ keys.transpose(1, 2)  # (b, num_tokens, num_tokens)
        attn_scores.masked_fill_(self.mask.bool()[:num_tokens, :num_tokens], -torch.inf)
        attn_weights = torch.softmax(attn_scores / keys.shape[-1] ** 0.5, dim=-1)  # (b, num_tokens, num_tokens)
        if self.training:
            keep = torch.rand_like(attn_weights) >= self.p  # a dropout written by hand
            attn_weights = attn_weights * keep KEPT
        context_vec = attn_weights @ values  # (b, num_tokens, d_out)
        return context_vec
'''


def _run(plugin_folder, use_plugins, name: str, kept: str, *overrides: str):
    use_plugins(plugin_folder(name, _CAUSAL_ATTENTION.replace("NAME", name).replace(" KEPT", kept)))
    return attnlab.run(name, 123, overrides=list(overrides), log=OFF)


@pytest.mark.slow
def test_a_dropout_that_does_not_rescale_is_dropout_unscaled(plugin_folder, use_plugins):
    result = _run(plugin_folder, use_plugins, "dropout_unscaled_by_hand", "", "train=true", "dropout=0.5")
    assert [(f.code, f.stage, f.severity) for f in result.findings] == [("dropout_unscaled", "weights_applied", "error")]
    weights = np.asarray(result.record.variant.stages["weights"], dtype=np.float64)
    applied = np.asarray(result.record.variant.stages["weights_applied"], dtype=np.float64)
    zeroed = (applied == 0) & (weights != 0)
    share = 100 * zeroed.sum() / (weights != 0).sum()  # the part of the weights the draw zeroed
    row_sum = applied.sum(axis=-1).mean()  # what a query's weights as applied sum to
    message = result.findings[0].message
    assert float(re.match(r"([0-9.]+)% of the attention weights", message)[1]) == pytest.approx(share, rel=1e-3)
    assert float(re.search(r"sum to ([0-9.]+) on average", message)[1]) == pytest.approx(row_sum, rel=1e-3)
    assert "not multiplied by 1/(1 - p)" in message


@pytest.mark.slow
def test_a_dropout_by_hand_that_rescales_is_the_dropout_note(plugin_folder, use_plugins):
    result = _run(plugin_folder, use_plugins, "dropout_rescaled_by_hand", " / (1 - self.p)", "train=true", "dropout=0.5")
    assert [(f.code, f.severity) for f in result.findings] == [("dropout", "info")]


@pytest.mark.parametrize("overrides", [["train=true", "dropout=0.5"], []])
def test_the_source_s_causal_attention_is_not_dropout_unscaled(overrides):
    codes = [f.code for f in attnlab.run("causal_attention", 123, overrides=overrides, log=OFF).findings]
    assert codes == (["dropout"] if overrides else [])


@pytest.mark.slow
def test_the_same_mistake_in_eval_mode_draws_nothing_and_finds_nothing(plugin_folder, use_plugins):
    assert _run(plugin_folder, use_plugins, "dropout_unscaled_in_eval", "").findings == []


def test_the_development_guide_shows_the_check_as_its_file_holds_it():
    root = Path(__file__).resolve().parents[2]
    guide = (root / "docs" / "guide" / "development.md").read_text(encoding="utf-8")
    shown = guide.split("## Adding a finding code", 1)[1].split("```python\n", 1)[1].split("```", 1)[0]
    assert shown in (root / "src" / "attnlab" / "diagnosis" / "checks" / "dropout_scale.py").read_text(encoding="utf-8")
