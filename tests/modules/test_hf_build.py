"""Building a transformers attention class from its config alone, with what its model's own code
passes beside the config: expected values read off the config, never off the built module's class."""

from __future__ import annotations

import pytest

import attnlab
from tests.modules.hf_runs import SIZES

pytest.importorskip("transformers")

from transformers.models.sam.modeling_sam import SamAttention  # noqa: E402

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
    # its low-rank queries take none of the reference's weights, but its scores are captured beside the
    # indexer's key selection, so it is compared: the selection declared, no error
    assert result.record.status == "ok", result.record.error
    assert [f.code for f in result.findings if f.severity == "error"] == []
    assert "sparse_keys" in {f.code for f in result.findings}


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


# Built with the arguments its owning model passes it (attnlab.modules.hf_capture), where the model's
# construction code does not evaluate alone: expected values from the model's own instance or computed here.


def _sam_heads(x, heads):  # (b, T, d) -> (b, heads, T, d / heads)
    return x.reshape(x.shape[0], x.shape[1], heads, -1).transpose(1, 2)


def test_sam_s_attention_is_built_from_its_mask_decoder_s_config_as_its_first_block_builds_it():
    """SamAttention is built by the mask decoder, from its own config, the first two-way block's
    self-attention with downsample_rate=1 (the config's attention_downsample_rate is 2): its inner
    width is attnlab's d_out, and it computes multi-head attention over its four projections."""
    import torch
    from transformers.models.sam.configuration_sam import SamMaskDecoderConfig

    module = hf.hf_constructor("hf:sam_prompt_encoder")(64, 64, 4).eval()
    assert type(module) is SamAttention and isinstance(module.config, SamMaskDecoderConfig)
    assert module.config.attention_downsample_rate == 2 and module.internal_dim == 64
    assert (module.config.hidden_size, module.num_attention_heads) == (64, 4)
    assert module.config._attn_implementation == "eager"  # the run's kernel, not the sub-config's default
    sdpa = hf.hf_constructor("hf:sam_prompt_encoder")(64, 64, 4, attn_implementation="sdpa")
    assert sdpa.config._attn_implementation == "sdpa"
    torch.manual_seed(0)
    x = torch.randn(2, 1, 5, 64)  # (b, point_batch, num_tokens, d_in)
    out, _ = module(x, x, x)
    flat = x[:, 0]  # (b, num_tokens, d_in)
    queries, keys, values = (_sam_heads(p(flat), 4) for p in (module.q_proj, module.k_proj, module.v_proj))
    attn_weights = torch.softmax(queries @ keys.transpose(-1, -2) / 16 ** 0.5, dim=-1)  # (b, heads, T, T)
    context_vec = (attn_weights @ values).transpose(1, 2).reshape(2, 5, 64)  # (b, num_tokens, d_out)
    torch.testing.assert_close(out[:, 0], module.out_proj(context_vec))


def _same_as_in_model(module, model_cls, config, attention_cls):
    """The module's state and sizes are those of its model's own first instance of the class."""
    import torch

    with torch.device("meta"):
        model = model_cls(config)
    own = next(m for m in model.modules() if type(m) is attention_cls)
    assert {k: v.shape for k, v in module.state_dict().items()} == {k: v.shape for k, v in own.state_dict().items()}
    return own


def test_led_s_window_is_its_layers_as_its_model_makes_it_from_the_config():
    """LEDEncoderSelfAttention(config, layer_id) reads config.attention_window[layer_id]; the config
    holds one int (512), which LED's encoder makes a per-layer list before building its layers."""
    from transformers import LEDConfig, LEDModel
    from transformers.models.led.modeling_led import LEDEncoderSelfAttention

    module = hf.hf_constructor("hf:led")(64, 64, 4)
    assert LEDConfig().attention_window == 512
    assert module.one_sided_attn_window_size == 256 and module.num_heads == 4 and module.embed_dim == 64
    own = _same_as_in_model(module, LEDModel, LEDConfig(d_model=64, encoder_attention_heads=4,
                                                         decoder_attention_heads=4), LEDEncoderSelfAttention)
    assert own.one_sided_attn_window_size == module.one_sided_attn_window_size


def test_clap_s_audio_attention_takes_its_stage_s_width_heads_and_window_as_its_model_passes_them():
    """ClapAudioSelfAttention(config, dim, num_heads, window_size): positional values its Swin-like
    audio encoder computes per stage; the first stage's at attnlab's sizes."""
    from transformers import ClapAudioConfig, ClapAudioModel
    from transformers.models.clap.modeling_clap import ClapAudioSelfAttention

    module = hf.hf_constructor("hf:clap")(64, 64, 4)
    config = ClapAudioConfig()
    assert (module.num_attention_heads, module.all_head_size) == (4, 64)
    assert module.window_size == (config.window_size, config.window_size)
    assert module.relative_position_bias_table.shape == ((2 * config.window_size - 1) ** 2, 4)
    sized = ClapAudioConfig(patch_embeds_hidden_size=64, hidden_size=64, num_attention_heads=[4] * 4)
    _same_as_in_model(module, ClapAudioModel, sized, ClapAudioSelfAttention)


class SamHalfScale(SamAttention):
    """Planted in a class built from its model's captured arguments: the scores scaled by half its own scale."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.scaling = self.scaling / 2


def _errors(result) -> list[tuple[str, str]]:
    assert result.record.status == "ok", result.record.error
    return [(f.code, f.stage) for f in result.findings if f.severity == "error"]


@pytest.mark.slow
@pytest.mark.parametrize(("variant", "expected"), [("hf:sam_prompt_encoder", None), ("hf:slanext", None),
                                                   (SamHalfScale, ("scaling", "scaled_scores"))])
def test_a_class_built_from_captured_arguments_says_true_things(variant, expected):
    result = attnlab.run(variant, overrides=SIZES)
    found = _errors(result)
    assert (expected in found) if expected else found == [], [f.message for f in result.findings]


def test_a_class_neither_way_builds_says_how_each_failed_in_one_line():
    """Moonshine Streaming's default config has no num_key_value_heads, which its decoder layers read:
    transformers' own model cannot be built from it either, and the error says so."""
    from transformers import MoonshineStreamingConfig

    assert not hasattr(MoonshineStreamingConfig(), "num_key_value_heads")
    with pytest.raises(hf.HFError, match="nor is it reached by building its model") as caught:
        hf.hf_constructor("hf:moonshine_streaming")(64, 64, 4)
    assert "MoonshineStreamingModel: AttributeError" in str(caught.value) and "\n" not in str(caught.value)


def test_a_composite_s_derived_sizes_follow_the_run_s_for_a_class_built_from_its_sub_config():
    """Sapiens 2's decode-head type: its attention is built by the backbone model, whose config derives
    each layer's key/value heads from its heads in its own construction. Built at the run's 4 heads,
    the layer's key/value heads are the ones that construction derives from 4 (read off the library's
    config in plain transformers), not its default 16's."""
    from transformers import Sapiens2Config

    derived = Sapiens2Config(hidden_size=64, num_attention_heads=4).num_key_value_heads_per_layer[0]
    module = hf.hf_constructor("hf:sapiens2_head")(64, 64, num_heads=4)
    assert module.num_key_value_heads == derived
    assert module.k_proj.out_features == derived * 64 // 4
