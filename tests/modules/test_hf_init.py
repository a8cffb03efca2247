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
