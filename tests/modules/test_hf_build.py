"""Building a transformers attention class from its config alone, with what its model's own code
passes beside the config: expected values read off the config, never off the built module's class."""

from __future__ import annotations

import pytest

import attnlab

pytest.importorskip("transformers")

from attnlab.modules import hf  # noqa: E402
from attnlab.modules.hf_build import model_arguments  # noqa: E402


def _config(model_type: str) -> object:
    _, config_cls = hf.attention_class(model_type)
    config = config_cls()
    config._attn_implementation = "eager"
    return config


@pytest.mark.parametrize("layer", [0, 1])
def test_gpt_neo_s_attention_type_is_its_layers_from_the_config(layer: int) -> None:
    # GPTNeoAttention(config, layer_id) -> GPTNeoSelfAttention(config, self.attention_type, layer_id),
    # self.attention_type = config.attention_layers[layer_id]
    config = _config("gpt_neo")
    cls, _ = hf.attention_class("gpt_neo")
    module = hf.build_attention(cls, config, layer=layer)
    assert module.attention_type == config.attention_layers[layer] == ("global", "local")[layer]


def test_a_flag_the_stack_passes_its_first_layer_only() -> None:
    # Pop2Piano's stack: Pop2PianoBlock(config, has_relative_attention_bias=bool(i == 0), layer_idx=i)
    config = _config("pop2piano")
    cls, _ = hf.attention_class("pop2piano")
    first, second = (model_arguments(cls, config, i) for i in (0, 1))
    assert first[1]["has_relative_attention_bias"] is True and second[1]["has_relative_attention_bias"] is False
    # a copy of a family's class (Pop2Piano's of T5's) is built as that family's adapter declares
    assert not hf.build_attention(cls, config, layer=0).has_relative_attention_bias


def test_a_class_no_class_of_its_module_builds_has_no_model_arguments() -> None:
    from torch import nn

    class Alone(nn.Module):
        pass

    Alone.__module__ = "transformers.models.llama.modeling_llama"
    assert model_arguments(Alone, _config("llama")) is None


def test_a_per_layer_config_is_read_for_the_layer_built_not_refused_as_ambiguous():
    """Dots3's config declares its heads per layer; transformers refuses a global read of them.
    The layer attnlab builds has no override, so its sizes are the config's own: it runs, and the
    heads it reads are the ones the module was built with."""
    from attnlab.modules.hf import hf_constructor

    module = hf_constructor("hf:dots3_note_text")(64, 64, 4)
    assert module.config.is_heterogeneous and module.num_heads == 4
    result = attnlab.run("hf:dots3_note_text", overrides=["inputs=random", "inputs.n_tokens=8", "inputs.d_in=64",
                                                          "d_out=64", "num_heads=4"])
    assert result.record.status == "ok", result.record.error
    assert not [f for f in result.findings if f.severity == "error"], [f.message for f in result.findings]


def test_a_sub_model_built_from_its_config_is_not_built_to_read_an_argument():
    """Parakeet's (Cohere ASR's) constructor builds its encoder with AutoModel.from_config: reading the
    attention's arguments must not build that model at its default sizes."""
    import ast

    from transformers.models.parakeet import modeling_parakeet

    from attnlab.modules.hf_build import _builds_module

    scope = {"config": None}
    for source in ("AutoModel.from_config(config.encoder_config)", "ParakeetEncoder._from_config(config)",
                   "nn.Linear(4, 4)"):
        assert _builds_module(ast.parse(source, mode="eval").body, modeling_parakeet, scope), source
    assert not _builds_module(ast.parse("len(str(config))", mode="eval").body, modeling_parakeet, scope)
