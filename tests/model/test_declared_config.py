"""What a model's config declares is read once, when the request is checked (attnlab.model.declared_config),
and handed on: the load builds an hf:TYPE model from that same config object, never a second one."""

from __future__ import annotations

import pytest

from attnlab.model import loading
from attnlab.model.declared_config import read_declared
from attnlab.model.loading import load_model
from attnlab.model.model_spec import model_spec

GPT2 = {"name": "hf:gpt2", "n_layer": 2, "n_head": 4, "n_embd": 64}


@pytest.mark.slow  # builds a Hugging Face model (transformers' GPT-2 modules imported: seconds)
def test_an_hf_type_s_config_is_built_once_and_the_model_from_it(monkeypatch) -> None:
    declared = read_declared(model_spec(GPT2))
    assert (declared.heads, declared.layers, declared.reads_text) == (4, 2, True)
    monkeypatch.setattr(loading, "hf_config", lambda _spec: pytest.fail("the config was built a second time"))
    model = load_model(model_spec(GPT2), 0, declared.config).module
    assert len(model.transformer.h) == 2
    assert model.transformer.h[0].attn.c_attn.weight.shape == (64, 3 * 64)  # Conv1D: (d_in, 3 * d_out)


def test_a_model_known_only_once_built_declares_nothing() -> None:
    declared = read_declared(model_spec({"name": "my_gpt"}))  # a class of your own in ./models/
    assert (declared.values, declared.config, declared.heads, declared.layers) == (None, None, None, None)
