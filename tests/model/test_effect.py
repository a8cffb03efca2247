"""The effect of a variant in a model, checked against the same model run by hand with the layer's
attention replaced (Hugging Face's own forward and logits; the replacement written here with
F.scaled_dot_product_attention), never against attnlab."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import attnlab
from attnlab.inputs.text import gpt2_encoding
from tests.model.conftest import N_HEAD, N_LAYER, TEXT


class HandAttention(nn.Module):
    """GPT-2's attention written out from its c_attn and c_proj, with a scale of our choosing."""

    def __init__(self, hf_attention: nn.Module, scale: float) -> None:
        super().__init__()
        self.hf, self.scale = hf_attention, scale

    def forward(self, hidden_states, *args, **kwargs):
        b, t, d = hidden_states.shape
        qkv = hidden_states @ self.hf.c_attn.weight + self.hf.c_attn.bias  # (b, t, 3d): Conv1D is x @ W + b
        q, k, v = (part.view(b, t, N_HEAD, d // N_HEAD).transpose(1, 2) for part in qkv.split(d, dim=-1))  # (b, nh, t, hs)
        context = F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=self.scale)  # (b, nh, t, hs)
        out = context.transpose(1, 2).reshape(b, t, d) @ self.hf.c_proj.weight + self.hf.c_proj.bias  # (b, t, d)
        return out, None


def by_hand(folder, layer: int, scale_of) -> dict[str, float]:
    from transformers import GPT2LMHeadModel

    model = GPT2LMHeadModel.from_pretrained(folder, attn_implementation="eager").eval()
    ids = torch.tensor([gpt2_encoding().encode(TEXT)])  # (1, T)
    with torch.no_grad():
        base = model(ids, output_hidden_states=True)
        d = model.config.n_embd
        model.transformer.h[layer].attn = HandAttention(model.transformer.h[layer].attn, scale_of(d))
        changed = model(ids, output_hidden_states=True)
    p, q = F.log_softmax(base.logits[0], -1), F.log_softmax(changed.logits[0], -1)  # (T, vocab)
    kl = (p.exp() * (p - q)).sum(-1)  # (T,)
    hidden_base, hidden_changed = base.hidden_states[-1][0], changed.hidden_states[-1][0]  # (T, d), after ln_f
    return {"kl_mean": float(kl.mean()), "kl_max": float(kl.max()),
            "top1_agreement": float((p.argmax(-1) == q.argmax(-1)).float().mean()),
            "loss": float(F.cross_entropy(base.logits[0, :-1], ids[0, 1:])),
            "loss_changed": float(F.cross_entropy(changed.logits[0, :-1], ids[0, 1:])),
            "hidden_divergence": float((hidden_changed - hidden_base).abs().max())}


def in_model(folder, variant: str, layer) -> list:
    results = attnlab.run(variant, overrides=[f"model.path={folder}", "inputs=text", f"inputs.text='{TEXT}'",
                                              f"layer={layer}", "log.tensorboard=false"])
    return results if isinstance(results, list) else [results]


def test_a_planted_scale_at_layer_1_matches_the_model_run_by_hand(tiny_gpt2) -> None:
    [result] = in_model(tiny_gpt2, "mha_scaled_by_d_out", 1)
    expected = by_hand(tiny_gpt2, 1, lambda d: d ** -0.5)
    effect = result.record.model.effect
    assert result.record.model.layer == 1
    for key, value in expected.items():
        assert getattr(effect, key) == pytest.approx(value, rel=1e-3, abs=1e-6), key
    assert effect.kl_mean > 1e-4  # the change shows in the predictions
    assert ("scaling", "scaled_scores") in {(f.code, f.stage) for f in result.findings}


def test_the_reference_computation_in_the_model_changes_nothing(tiny_gpt2) -> None:
    [result] = in_model(tiny_gpt2, "multi_head_attention", 1)
    effect = result.record.model.effect
    unchanged = by_hand(tiny_gpt2, 1, lambda d: (d // N_HEAD) ** -0.5)  # the hand module at GPT-2's own scale
    assert unchanged["kl_max"] < 1e-5 and unchanged["top1_agreement"] == 1.0  # float32 rounding only: the hand module is GPT-2's layer
    assert effect.kl_max < 1e-5 and effect.top1_agreement == 1.0
    assert effect.loss == pytest.approx(unchanged["loss"], rel=1e-5)
    assert effect.loss_changed == pytest.approx(effect.loss, rel=1e-6)
    assert not [f for f in result.findings if f.severity == "error"]


def test_layer_all_gives_one_record_per_layer_each_as_by_hand(tiny_gpt2) -> None:
    results = in_model(tiny_gpt2, "mha_scaled_by_d_out", "all")
    assert [r.record.model.layer for r in results] == list(range(N_LAYER))
    for result in results:
        expected = by_hand(tiny_gpt2, result.record.model.layer, lambda d: d ** -0.5)
        assert result.record.model.effect.kl_mean == pytest.approx(expected["kl_mean"], rel=1e-3)
        assert not math.isnan(result.record.model.effect.loss)


def test_a_named_reference_holds_the_layers_parameters_too(tiny_gpt2) -> None:
    result = attnlab.run("multi_head_attention", overrides=[
        f"model.path={tiny_gpt2}", "inputs=text", f"inputs.text='{TEXT}'", "layer=0", "reference=mha_scaled_by_d_out",
        "log.tensorboard=false"])
    assert result.record.reference.name == "mha_scaled_by_d_out with the parameters of GPT2Attention (layer 0)"
    assert result.first_divergent_stage == "scaled_scores"  # the two differ in the scale only
    assert result.record.model.effect.kl_max < 1e-5  # the effect is always the variant's, in the model
