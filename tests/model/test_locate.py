"""Where a model's attention lives, found in real Hugging Face models built from their configs: by
name, by class where the name is the model's own (BLOOM, CTRL, a wrapper's inside in CPM-Ant), and
in the tower that reads the token ids where a composite holds a vision tower too (Gemma 3, GIT)."""

from __future__ import annotations

import pytest
import torch

from attnlab.model.locate import attention_modules

transformers = pytest.importorskip("transformers")

SMALL = dict(hidden_size=64, num_attention_heads=4, num_hidden_layers=2, vocab_size=512, intermediate_size=128)


def causal_lm(model_type: str, **sizes) -> torch.nn.Module:
    config = transformers.AutoConfig.for_model(model_type, **sizes)
    return transformers.AutoModelForCausalLM.from_config(config)


def test_attention_named_by_the_model_is_found_by_its_class() -> None:
    bloom = causal_lm("bloom", hidden_size=64, n_head=4, n_layer=2, vocab_size=512)
    ctrl = causal_lm("ctrl", n_embd=64, n_head=4, n_layer=2, vocab_size=512, dff=128)
    assert [m for _, m in attention_modules(bloom)] == [block.self_attention for block in bloom.transformer.h]
    assert [m for _, m in attention_modules(ctrl)] == [block.multi_head_attention for block in ctrl.transformer.h]


def test_in_a_block_the_outermost_attention_class_is_the_layer_s() -> None:
    cpmant = causal_lm("cpmant", hidden_size=64, num_attention_heads=4, dim_head=16, dim_ff=128,
                       num_hidden_layers=2, vocab_size=512)
    found = attention_modules(cpmant)
    layers = cpmant.cpmant.encoder.layers
    # CpmAntSelfAttentionBlock (layer norm, attention, dropout) is no ...Attention class: its CpmAntAttention is
    assert [m for _, m in found] == [layer.self_att.self_attention for layer in layers]
    assert found[0][0] == "cpmant.encoder.layers.0.self_att.self_attention"


def test_a_composite_s_attention_is_its_text_tower_s() -> None:
    gemma3 = causal_lm("gemma3", text_config=dict(SMALL, num_key_value_heads=2, head_dim=16),
                       vision_config=dict(SMALL, image_size=32, patch_size=8))
    assert [m for _, m in attention_modules(gemma3)] == [layer.self_attn for layer in gemma3.model.language_model.layers]
    git = causal_lm("git", **SMALL, vision_config=dict(SMALL, image_size=32, patch_size=8))
    assert [m for _, m in attention_modules(git)] == [layer.attention.self for layer in git.git.encoder.layer]

