"""A parameter an attention class creates empty (`nn.Parameter(torch.empty(...))`) gets the value its
model's own initialisation gives it, read here from the model transformers builds itself."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("transformers")


def test_an_empty_parameter_gets_its_models_initial_value_and_the_projections_are_kept():
    from transformers import TimesFmConfig, TimesFmModel
    from transformers.models.timesfm.modeling_timesfm import TimesFmAttention

    from attnlab.modules.hf_init import initialised

    config = TimesFmConfig(hidden_size=64, num_attention_heads=4, head_dim=16, num_hidden_layers=1,
                           intermediate_size=64)
    model = TimesFmModel(config)  # transformers' own initialisation of its layers
    expected = next(m for m in model.modules() if isinstance(m, TimesFmAttention)).scaling.detach()
    module = TimesFmAttention(config, 0)
    with torch.no_grad():
        module.scaling.fill_(float("nan"))  # what an empty tensor may hold
    projection = module.q_proj.weight.detach().clone()
    initialised(module)
    assert torch.equal(module.scaling.detach(), expected)
    assert torch.equal(module.q_proj.weight.detach(), projection)  # attnlab's shared weights are left alone


def test_a_class_without_empty_parameters_is_left_as_built():
    from transformers import LlamaConfig
    from transformers.models.llama.modeling_llama import LlamaAttention

    from attnlab.modules.hf_init import initialised

    module = LlamaAttention(LlamaConfig(hidden_size=64, num_attention_heads=4), 0)
    before = {k: v.clone() for k, v in module.state_dict().items()}
    initialised(module)
    assert all(torch.equal(before[k], v) for k, v in module.state_dict().items())


@pytest.mark.slow  # builds through attnlab's Hugging Face constructor: ~7 s with its imports
def test_legacy_float_tensor_parameters_of_a_class_and_its_planted_copy_get_their_models_values():
    """XLNet's q, k, v, o, r and biases are `nn.Parameter(torch.FloatTensor(...))` (memory as it was),
    and its attention holds no config: built through attnlab (the library class, and a copy that
    subclasses it, as a planted mistake does), each is drawn as XLNetPreTrainedModel draws it,
    normal with std initializer_range (0.02), never the 1e30 a stale page may hold."""
    from transformers.models.xlnet.modeling_xlnet import XLNetRelativeAttention

    from attnlab.modules.hf import hf_constructor
    from attnlab.modules.hf_init import initialised

    class Copy(XLNetRelativeAttention):
        pass

    library = hf_constructor("hf:xlnet")(64, 64, 4)
    copy = Copy(library.config)
    with torch.no_grad():
        copy.q.fill_(float("nan"))  # what an unfilled tensor may hold
    copy.config = library.config
    for module in (library, initialised(copy)):
        for name in ("q", "k", "v", "o", "r", "r_w_bias", "r_r_bias", "r_s_bias", "seg_embed"):
            values = getattr(module, name).detach()
            assert torch.isfinite(values).all() and values.abs().max() < 0.2, name  # 10 std of 0.02
        assert 0.01 < module.q.detach().std() < 0.03
