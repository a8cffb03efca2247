"""How modules written the world's way are built, called and loaded: returns that are a
tuple or a model-output object, a constructor taking one config object, a layer index, a norm's
weight that is no projection bias, a plugin loader that raises."""

from __future__ import annotations

from collections import OrderedDict

import pytest
import torch

import attnlab
from attnlab.modules.built import SOURCE_CALL
from tests.modules.hf_runs import SIZES


def test_a_returned_tuple_gives_its_token_shaped_element_and_the_weights_beside_it():
    x = torch.zeros(2, 8, 64)
    out, weights = torch.ones(2, 8, 64), torch.full((2, 4, 8, 8), 0.125)
    returned = SOURCE_CALL.unpack((out, weights), x)
    assert returned.output is out and returned.weights is weights and returned.element == "[0]"
    assert returned.what == "tuple(Tensor (2, 8, 64), Tensor (2, 4, 8, 8))"


def test_a_model_output_object_gives_the_element_named_by_its_field():
    class ModelOutput(OrderedDict):  # transformers' ModelOutput is an OrderedDict of its set fields
        pass

    x, hidden = torch.zeros(2, 8, 64), torch.ones(2, 8, 64)
    returned = SOURCE_CALL.unpack(ModelOutput(attentions=None, last_hidden_state=hidden), x)
    assert returned.output is hidden and returned.element == ".last_hidden_state"


def test_a_plain_tensor_is_the_output_itself():
    x = torch.zeros(6, 3)
    returned = SOURCE_CALL.unpack(x @ torch.ones(3, 2), x)
    assert returned.element is None and returned.what == "Tensor (6, 2)"


@pytest.mark.slow
def test_a_dataclass_config_in_the_plugins_own_file_is_filled_under_its_own_spellings(use_plugins, plugin_folder):
    folder = plugin_folder("cfg_attention", '''
        from dataclasses import dataclass
        import torch.nn as nn
        import torch.nn.functional as F

        @dataclass
        class AttnConfig:
            dim: int = 512
            n_heads: int = 8
            window: int = 0

        class Attention(nn.Module):
            def __init__(self, config):
                super().__init__()
                self.n_heads, self.window = config.n_heads, config.window
                self.wq = nn.Linear(config.dim, config.dim, bias=False)
                self.wk = nn.Linear(config.dim, config.dim, bias=False)
                self.wv = nn.Linear(config.dim, config.dim, bias=False)
                self.wo = nn.Linear(config.dim, config.dim, bias=False)

            def forward(self, x):
                b, t, d = x.shape
                q, k, v = (w(x).view(b, t, self.n_heads, -1).transpose(1, 2) for w in (self.wq, self.wk, self.wv))
                y = F.scaled_dot_product_attention(q, k, v, is_causal=True)  # (b, nh, t, hs)
                return self.wo(y.transpose(1, 2).reshape(b, t, d))
    ''')
    use_plugins(folder)
    result = attnlab.run("cfg_attention", overrides=[*SIZES, "variant.params.window=3"])
    assert result.record.status == "ok", result.record.error
    assert result.findings == []
    from attnlab.modules.registry import get_variant

    assert "AttnConfig(dim=d_in, n_heads=num_heads)" in get_variant("cfg_attention").signature


@pytest.mark.slow
def test_a_failing_load_qkv_is_a_failed_record(use_plugins, plugin_folder):
    folder = plugin_folder("own_loader", '''
        import torch
        import torch.nn as nn

        class OwnLoader(nn.Module):
            def __init__(self, d_in, d_out):
                super().__init__()
                self.A = nn.Parameter(torch.rand(d_in, 3 * d_out))
                self.d_out = d_out

            def load_qkv(self, W_query, W_key, W_value):
                raise RuntimeError("cannot load")

            def forward(self, x):
                q, k, v = (x @ self.A).split(self.d_out, dim=-1)
                return torch.softmax(q @ k.T / k.shape[-1] ** 0.5, dim=-1) @ v
    ''')
    use_plugins(folder)
    result = attnlab.run("own_loader")
    assert result.record.status == "failed"
    assert result.record.error == "variant 'own_loader' could not take the shared weights: RuntimeError: cannot load"


@pytest.mark.slow
def test_a_module_failing_before_auto_chose_says_reference_auto(use_plugins, plugin_folder):
    folder = plugin_folder("fails_in_forward", '''
        import torch
        import torch.nn as nn

        class FailsInForward(nn.Module):
            def __init__(self, d_in, d_out):
                super().__init__()
                self.W = nn.Linear(d_in, d_out)

            def forward(self, x):
                raise RuntimeError("not today")
    ''')
    use_plugins(folder)
    result = attnlab.run("fails_in_forward")
    assert result.record.status == "failed" and result.record.reference.name == "auto"
    assert "RuntimeError: not today" in result.record.error


transformers = pytest.importorskip("transformers")


def test_a_norm_modules_weight_is_never_a_projection_bias():
    result = attnlab.run("hf:qwen3", overrides=SIZES)
    assert not any("norm" in name for name in result.record.weights_loaded), result.record.weights_loaded
    assert result.findings[0].code == "rotary" and {f.code for f in result.findings} == {"rotary", "qk_norm"}


def test_layer_idx_picks_gemmas_layer_kind():
    """Gemma2 alternates sliding-window (even) and full (odd) layers: the window shows on layer 0 only."""
    window = ["num_kv_heads=2", "variant.params.sliding_window=3"]
    sliding = attnlab.run("hf:gemma2", overrides=[*SIZES, *window])
    full = attnlab.run("hf:gemma2", overrides=[*SIZES, *window, "variant.params.layer_idx=1"])
    assert "window" in {f.code for f in sliding.findings}
    assert "window" not in {f.code for f in full.findings}
