"""A vision transformer whole: ViT's image classifier on a random image drawn from the seed, a
layer's attention swapped and the effect read on its class logits; checked against the model's own
forward run by hand with a copy written here with F.scaled_dot_product_attention."""

from __future__ import annotations

import math
import sys

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import attnlab
from attnlab.model.loading import load_model
from attnlab.model.model_spec import model_spec

VIT = {"name": "hf:vit", "image_size": 32, "patch_size": 8, "hidden_size": 64, "num_attention_heads": 4,
       "num_hidden_layers": 2, "intermediate_size": 128, "num_labels": 10,
       "initializer_range": 0.5}  # wide: sharp attention, so a change shows
SEED = 0
HEADS = 4


class HandAttention(nn.Module):
    """ViTAttention written out from its projections: the heads' context, merged, projected."""

    def __init__(self, hf: nn.Module, causal: bool) -> None:
        super().__init__()
        self.hf, self.causal = hf, causal

    def forward(self, hidden_states, *args, **kwargs):
        b, t, d = hidden_states.shape
        q, k, v = (proj(hidden_states).view(b, t, HEADS, d // HEADS).transpose(1, 2)
                   for proj in (self.hf.q_proj, self.hf.k_proj, self.hf.v_proj))  # (b, nh, t, hs)
        context = F.scaled_dot_product_attention(q, k, v, is_causal=self.causal)  # (b, nh, t, hs)
        return self.hf.o_proj(context.transpose(1, 2).reshape(b, t, d)), None  # (b, t, d)


def _by_hand(layer: int, causal: bool) -> tuple[float, bool]:
    """(KL of the class distributions, whether the top class agrees) with the copy at `layer`."""
    model = load_model(model_spec(VIT), SEED).module
    image = torch.randn(1, 3, 32, 32, generator=torch.Generator().manual_seed(SEED))  # (1, C, H, W) attnlab's
    block = model.vit.layers[layer]
    with torch.no_grad():
        base = model(pixel_values=image).logits[0]  # (labels,)
        block.attention = HandAttention(block.attention, causal)
        changed = model(pixel_values=image).logits[0]  # (labels,)
    p, q = F.log_softmax(base.double(), -1), F.log_softmax(changed.double(), -1)  # (labels,)
    return float((p.exp() * (p - q)).sum()), bool(base.argmax() == changed.argmax())


def _vit(variant: str, layer: int):
    overrides = [f"model.{key}={value}" for key, value in VIT.items() if key != "name"]
    return attnlab.run(variant, overrides=["model=hf:vit", *overrides, f"layer={layer}", f"seed={SEED}",
                                           "log.tensorboard=false"]).record


def test_a_correct_copy_of_vit_s_attention_gives_a_kl_of_zero_on_the_class_logits() -> None:
    record = _vit("bidirectional_attention", 1)
    assert record.model.attention == "vit.layers.1.attention"
    assert record.reference.name == "ViTAttention (layer 1)"
    assert record.labels == ["cls", *(f"p{i}" for i in range(16))]  # the class token and 4 x 4 patches
    assert not [f for f in record.findings if f.severity == "error"], [f.code for f in record.findings]
    assert record.model.effect.kl_max < 1e-6 and record.model.effect.top1_agreement == 1.0
    assert _by_hand(1, causal=False)[0] < 1e-6  # the copy is right: the model's own forward agrees


def test_a_causal_variant_in_vit_has_the_effect_of_the_same_swap_by_hand() -> None:
    record = _vit("multi_head_attention", 0)
    assert "masked" in {f.code for f in record.findings}  # the causal mask ViT does not have, named
    kl, agrees = _by_hand(0, causal=True)
    assert record.model.effect.kl_mean == pytest.approx(kl, rel=1e-5)
    assert record.model.effect.top1_agreement == float(agrees)
    assert kl > 1e-3


def test_every_layer_of_vit_is_compared_and_its_report_drawn_without_a_loss(tmp_path) -> None:
    overrides = [f"model.{key}={value}" for key, value in VIT.items() if key != "name"]
    results = attnlab.run("multi_head_attention", overrides=["model=hf:vit", *overrides, "layer=all",
                                                             "log.tensorboard=false"], out_dir=tmp_path)
    records = [result.record for result in results]
    assert [r.model.layer for r in records] == [0, 1] and all(r.ok for r in records)
    assert all(r.model.positions == 1 and math.isnan(r.model.effect.loss) for r in records)  # the image has no label
    assert (tmp_path / "report.html").is_file()
    assert "· image patches: cls p0 p1" in (tmp_path / "report.html").read_text()  # not "text:"


def test_the_headers_say_the_inputs_are_image_patches_not_the_inputs_config(capsys) -> None:
    """The `inputs` config (the book, by default) does not reach an image classifier: the header
    names what the attention ran on."""
    from attnlab.sinks.model_lines import print_layers
    from attnlab.sinks.terminal import config_line

    record = _vit("bidirectional_attention", 1)
    assert record.config["inputs"]["kind"] == "book"
    assert " inputs=image_patches n_tokens=17 " in config_line(record)
    print_layers([record], None, "records", sys.stdout)
    assert " inputs=image_patches n_tokens=17 " in capsys.readouterr().out
