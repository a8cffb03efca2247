"""Grouped key/value heads in either valid order: Llama's, where query head h reads kv head
h // group (repeat_interleave), and x-transformers', where it reads kv head h % kv_heads (repeat).
Both are the declared grouping, an info finding naming the order; a wrong key index is still an
error. The modules' own numbers are checked against F.scaled_dot_product_attention by hand."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import attnlab
from attnlab.capture.recorder import Capture, capture
from attnlab.compute.pipeline import diagnosed
from attnlab.diagnosis.kv_granularity import repetition, unrepeated

HEADS, KV_HEADS = 4, 2
KEYS = dict(num_heads=HEADS, num_kv_heads=KV_HEADS, d_out=16, inputs="random")
TOKENS = ["inputs.n_tokens=6", "inputs.d_in=5"]
ORDERS = {"grouped": lambda t, r: t.repeat_interleave(r, dim=1), "tiled": lambda t, r: t.repeat(1, r, 1, 1)}


class RepeatedKV(nn.Module):
    """Grouped-query attention written as a plugin: kv heads repeated to the query heads by
    `self.order` (ORDERS), or `self.order = "rolled"`: tiled with the keys one token off."""

    order = "tiled"

    def __init__(self, d_in, d_out, context_length, dropout, num_heads, num_kv_heads=None, qkv_bias=False):
        super().__init__()
        self.num_heads, self.num_kv_heads, self.head_dim = num_heads, num_kv_heads, d_out // num_heads
        self.W_query = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_key = nn.Linear(d_in, num_kv_heads * self.head_dim, bias=qkv_bias)
        self.W_value = nn.Linear(d_in, num_kv_heads * self.head_dim, bias=qkv_bias)
        self.out_proj = nn.Linear(d_out, d_out)

    def split(self, t: torch.Tensor) -> torch.Tensor:
        return t.unflatten(-1, (-1, self.head_dim)).transpose(1, 2)  # (b, h, t, hs)

    def forward(self, x):
        queries = self.split(self.W_query(x))  # (b, num_heads, t, hs)
        keys, values = self.split(self.W_key(x)), self.split(self.W_value(x))  # (b, num_kv_heads, t, hs)
        repeat = ORDERS["tiled" if self.order == "rolled" else self.order]
        keys = repeat(keys, self.num_heads // self.num_kv_heads)  # (b, num_heads, t, hs)
        values = repeat(values, self.num_heads // self.num_kv_heads)  # (b, num_heads, t, hs)
        if self.order == "rolled":
            keys = keys.roll(1, dims=-2)  # the mistake: each query scored against its neighbour's key
        scores = queries @ keys.transpose(2, 3)  # (b, num_heads, t, t)
        hidden = torch.triu(torch.ones(x.shape[1], x.shape[1], dtype=torch.bool), diagonal=1)
        weights = torch.softmax(scores.masked_fill(hidden, -torch.inf) / self.head_dim**0.5, dim=-1)
        context = (weights @ values).transpose(1, 2).flatten(-2)  # (b, t, d_out)
        return self.out_proj(context)


def by_hand(queries: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, order: str) -> torch.Tensor:
    """Causal attention of kv heads repeated in `order`, by F.scaled_dot_product_attention."""
    group = queries.shape[1] // keys.shape[1]
    return F.scaled_dot_product_attention(queries, ORDERS[order](keys, group), ORDERS[order](values, group),
                                          is_causal=True)  # (b, num_heads, t, hs)


@pytest.mark.parametrize("order", ORDERS)
def test_the_hand_written_module_is_its_order_by_sdpa(order):
    torch.manual_seed(0)
    module = type("Module", (RepeatedKV,), {"order": order})(5, 16, 6, 0.0, HEADS, KV_HEADS)
    x = torch.rand(2, 6, 5)
    with torch.no_grad():
        q, k, v = (module.split(p(x)) for p in (module.W_query, module.W_key, module.W_value))
        expected = module.out_proj(by_hand(q, k, v, order).transpose(1, 2).flatten(-2))
        assert torch.allclose(module(x), expected, atol=1e-6)


@pytest.mark.parametrize("order", ORDERS)
def test_repeated_heads_are_read_back_in_their_order(order):
    kv = torch.randn(2, KV_HEADS, 6, 4)  # (b, kv_heads, t, hs)
    repeated = ORDERS[order](kv, HEADS // KV_HEADS)  # (b, heads, t, hs)
    assert repetition(repeated, repeated, KV_HEADS) == order
    assert torch.equal(unrepeated(repeated, KV_HEADS, order), kv)
    neither = kv[:, [0, 1, 1, 0]]  # query head 2 reads kv head 1, which neither order gives it
    assert repetition(neither, neither, KV_HEADS) is None


def run(order: str, **keys):
    result = attnlab.run(type(f"{order}_kv", (RepeatedKV,), {"order": order}), overrides=TOKENS, **{**KEYS, **keys})
    assert result.record.status == "ok", result.record.error
    return result


@pytest.mark.parametrize("reference", ["multi_head_attention", "gqa"])
@pytest.mark.parametrize("order", ORDERS)
def test_either_order_is_the_declared_grouping_named_with_its_order(order, reference):
    """Against the source's MultiHeadAttention and against its grouped GQA: keys and values equal
    the reference's at kv-head granularity, the context is the module's own order by sdpa."""
    result = run(order, reference=reference)
    errors = [f.message for f in result.findings if f.severity == "error"]
    assert errors == []
    assert result.record.variant.diagnostics["divergence_keys"] < 1e-6
    assert result.record.variant.diagnostics["divergence_values"] < 1e-6
    notes = [f for f in result.findings if f.code == "kv_heads"]
    if order == "grouped" and reference == "gqa":
        assert notes == []  # the same grouping as the reference's: nothing to say
        return
    (note,) = notes
    assert note.severity == "info" and f"{order}: query head h reads key/value head" in note.message
    stages = {s: torch.as_tensor(result.stages[s]) for s in ("queries", "keys", "values", "context")}
    assert stages["keys"].shape[1] == KV_HEADS
    assert torch.allclose(by_hand(stages["queries"], stages["keys"], stages["values"], order), stages["context"],
                          atol=1e-5)


def test_a_wrong_key_index_under_a_tiled_grouping_is_still_an_error():
    result = run("rolled")
    assert "key_index" in {f.code for f in result.findings if f.severity == "error"}
    assert "kv_heads" not in {f.code for f in result.findings}


def test_x_transformers_attention_with_kv_heads_is_the_tiled_grouping():
    x_transformers = pytest.importorskip("x_transformers", reason="x-transformers is an optional library")
    result = attnlab.run(x_transformers.x_transformers.Attention, overrides=[*TOKENS, "+variant.params.causal=true"],
                         **KEYS)
    assert result.record.status == "ok", result.record.error
    assert [f.message for f in result.findings if f.severity == "error"] == []
    (note,) = [f for f in result.findings if f.code == "kv_heads"]
    assert "tiled: query head h reads key/value head h % 2" in note.message
    assert result.record.variant.diagnostics["divergence_keys"] < 1e-6


def as_captured(captured: Capture) -> tuple:
    """What a capture holds that the kv-head alignment views otherwise: its stages, their shapes, its kv heads."""
    return ({name: t.clone() for name, t in captured.stages.items()}, dict(captured.native_shapes),
            captured.kv_heads, captured.kv_order)


def test_the_diagnosis_compares_kv_heads_on_copies_leaving_the_captures_as_captured():
    """A tiled GQA variant against a reference with a kv head per query head, weights shared: both
    sides' keys and values are diagnosed at the variant's 2 kv heads, both captures keep their 4."""
    torch.manual_seed(0)
    x = torch.rand(2, 6, 5)
    variant = capture(type("Tiled", (RepeatedKV,), {"order": "tiled"})(5, 16, 6, 0.0, HEADS, KV_HEADS), x)
    reference = capture(RepeatedKV(5, 16, 6, 0.0, HEADS, HEADS), x)
    before = [as_captured(c) for c in (variant, reference)]
    diagnosis = diagnosed(variant, reference, shared=True, train=False, expect={})
    assert diagnosis.variant.shapes["keys"] == diagnosis.reference.shapes["keys"] == [2, KV_HEADS, 6, 4]
    for captured, (stages, shapes, kv_heads, kv_order) in zip((variant, reference), before):
        assert captured.stages.keys() == stages.keys()
        assert all(torch.equal(captured.stages[name], stages[name]) for name in stages)
        assert captured.native_shapes == shapes and captured.native_shapes["keys"] == (2, HEADS, 6, 4)
        assert (captured.kv_heads, captured.kv_order) == (kv_heads, kv_order) == (None, "grouped")
