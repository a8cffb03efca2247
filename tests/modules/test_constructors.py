"""Constructors of the world's attention classes: x-transformers' and diffusers'
heads/dim_head/kv_heads (their signatures written here: neither library is installed), Hugging
Face's size-built classes (BART, Whisper, M2M100), T5's d_kv and CLIP's composite config."""

from __future__ import annotations

import pytest

from attnlab.modules.built import plan

VALUES = {"d_in": 64, "d_out": 64, "num_heads": 4, "n_tokens": 8, "dropout": 0.0, "qkv_bias": False}

X_TRANSFORMERS = '''
import torch.nn as nn

class Attention(nn.Module):
    """x-transformers' Attention signature (its leading parameters)."""
    def __init__(self, dim, dim_head=64, heads=8, causal=False, flash=False, talking_heads=False,
                 kv_heads=None, dropout=0.0, qk_norm=False, dim_out=None):
        super().__init__()
        self.got = dict(dim=dim, dim_head=dim_head, heads=heads, kv_heads=kv_heads, dim_out=dim_out)
'''
DIFFUSERS = '''
import torch.nn as nn

class Attention(nn.Module):
    """diffusers' Attention signature (its leading parameters)."""
    def __init__(self, query_dim, cross_attention_dim=None, heads=8, kv_heads=None, dim_head=64, dropout=0.0,
                 bias=False, out_dim=None):
        super().__init__()
        self.got = dict(query_dim=query_dim, cross_attention_dim=cross_attention_dim, heads=heads,
                        kv_heads=kv_heads, dim_head=dim_head, out_dim=out_dim)
'''


@pytest.mark.parametrize("source, expected", [
    (X_TRANSFORMERS, dict(dim=64, dim_head=12, heads=4, kv_heads=2, dim_out=48)),
    (DIFFUSERS, dict(query_dim=64, cross_attention_dim=None, heads=4, kv_heads=2, dim_head=12, out_dim=48)),
])
@pytest.mark.slow
def test_heads_dim_head_and_kv_heads_are_read_as_the_head_counts(use_plugins, plugin_folder, source, expected):
    """d_out never lands positionally in dim_head or cross_attention_dim; dim_head is d_out / heads."""
    use_plugins(plugin_folder("library_attention", f"{source}\n"))
    values = {**VALUES, "d_out": 48, "num_kv_heads": 2}
    planned = plan("library_attention", values)
    assert planned.instantiate().got == expected
    assert planned.num_heads == 4 and planned.num_kv_heads == 2


transformers = pytest.importorskip("transformers")


@pytest.mark.parametrize("model_type", ["bart", "whisper", "m2m_100"])
def test_a_size_built_hugging_face_class_gets_its_width_and_heads_by_name(model_type):
    module = plan(f"hf:{model_type}", VALUES).instantiate()
    assert (module.embed_dim, module.num_heads, module.head_dim) == (64, 4, 16)
    assert module.q_proj.weight.shape == (64, 64)


def test_t5_d_kv_is_d_out_over_num_heads():
    module = plan("hf:t5", VALUES).instantiate()
    assert (module.key_value_proj_dim, module.n_heads) == (16, 4) and module.q.weight.shape == (64, 64)


def test_clips_composite_config_runs_its_text_tower_and_names_the_vision_one():
    from attnlab.modules.registry import _hf_spec

    planned = plan("hf:clip", VALUES)
    module = planned.spec.cls(*planned.args, **planned.kwargs)
    assert (type(module).__name__, type(module.config).__name__) == ("CLIPAttention", "CLIPTextConfig")
    assert module.config.hidden_size == 64 and module.config.num_attention_heads == 4
    assert "the others: hf:clip_vision_model" in _hf_spec("hf:clip").description
