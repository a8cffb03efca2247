"""BERT's layer swap at its self-attention (`BertSelfAttention`), never its wrapper (`BertAttention`,
whose `output` adds the projection, the residual and the LayerNorm): checked against the model's
own forward run by hand with a copy written here with F.scaled_dot_product_attention."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from attnlab.model.loading import load_model
from attnlab.model.model_spec import model_spec
from tests.model.conftest import TEXT
from tests.model.test_loading import run

BERT = {"name": "hf:bert", "hidden_size": 64, "num_attention_heads": 4, "num_hidden_layers": 2,
        "intermediate_size": 128, "initializer_range": 0.5}  # wide: sharp attention, so a change shows
SEED = 0


class HandSelfAttention(nn.Module):
    """BertSelfAttention written out from its query, key and value: the heads' context, merged."""

    def __init__(self, hf: nn.Module, causal: bool) -> None:
        super().__init__()
        self.hf, self.causal = hf, causal

    def forward(self, hidden_states, *args, **kwargs):
        b, t, d = hidden_states.shape
        q, k, v = (proj(hidden_states).view(b, t, 4, d // 4).transpose(1, 2)
                   for proj in (self.hf.query, self.hf.key, self.hf.value))  # (b, nh, t, hs)
        context = F.scaled_dot_product_attention(q, k, v, is_causal=self.causal)  # (b, nh, t, hs)
        return context.transpose(1, 2).reshape(b, t, d), None  # (b, t, d)


def _kl_by_hand(layer: int, causal: bool, where: str = "self") -> float:
    loaded = load_model(model_spec(BERT), SEED)
    model, ids = loaded.module, torch.tensor([loaded.tokenizer.encode(TEXT)])  # (1, T)
    wrapper = model.bert.encoder.layer[layer].attention
    with torch.no_grad():
        base = model(input_ids=ids).logits[0]  # (T, vocab)
        if where == "self":
            wrapper.self = HandSelfAttention(wrapper.self, causal)
        else:
            model.bert.encoder.layer[layer].attention = HandSelfAttention(wrapper.self, causal)
        changed = model(input_ids=ids).logits[0]  # (T, vocab)
    p, q = F.log_softmax(base, -1), F.log_softmax(changed, -1)  # (T, vocab)
    return float((p.exp() * (p - q)).sum(-1).mean())


def _bert(variant: str, layer: int):
    overrides = [f"model.{key}={value}" for key, value in BERT.items() if key != "name"]
    return run("model=hf:bert", *overrides, f"layer={layer}", f"seed={SEED}", variant=variant).record


def test_a_correct_copy_of_bert_s_self_attention_gives_a_kl_of_zero() -> None:
    record = _bert("bidirectional_attention", 1)
    assert record.model.attention == "bert.encoder.layer.1.attention.self"
    assert record.reference.name == "BertSelfAttention (layer 1)"
    assert not [f for f in record.findings if f.severity == "error"], [f.code for f in record.findings]
    assert record.model.effect.kl_max < 1e-6
    assert _kl_by_hand(1, causal=False) < 1e-6  # the copy is right: the model's own forward agrees
    assert _kl_by_hand(1, causal=False, where="wrapper") > 1e-3  # the wrapper's residual and LayerNorm matter


def test_a_causal_variant_in_bert_has_the_effect_of_the_same_swap_by_hand() -> None:
    record = _bert("multi_head_attention", 0)
    assert {f.code for f in record.findings if f.severity == "error"} == set()
    assert "masked" in {f.code for f in record.findings}  # the causal mask BERT does not have, named
    assert record.model.effect.kl_mean == pytest.approx(_kl_by_hand(0, causal=True), rel=1e-3)
    assert record.model.effect.kl_mean > 1e-3
