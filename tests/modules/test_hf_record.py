"""A Hugging Face attention class fed its model's own recorded call where attnlab's own inputs do
not fit it (attnlab.modules.hf_record), and the small model that call is recorded from
(attnlab.modules.hf_small). Expected values come from the model's own forward: a hook on its
attention layer keeps what the layer was given and what it returned."""

from __future__ import annotations

import copy

import pytest
import torch

import attnlab
from tests.modules.hf_runs import SIZES, assert_equals_its_layer_in, assert_runs_clean, errors, softmax_over_queries

pytest.importorskip("transformers")

from attnlab.modules import hf_record, hf_small  # noqa: E402
from attnlab.modules.built import HUGGING_FACE_CALL  # noqa: E402
from attnlab.modules.hf import hf_constructor  # noqa: E402


def _models_own_call(module: torch.nn.Module, model_cls: type, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(hidden states, output) of the model's first attention layer, holding `module`'s weights, when
    the model (one layer, eager) is run on x as its input embeddings."""
    config = copy.deepcopy(module.config)
    config.num_hidden_layers = 1
    config.layer_types = config.layer_types[:1]
    config._attn_implementation = "eager"
    model = model_cls(config).eval()
    layer = next(m for m in model.modules() if type(m) is type(module))
    layer.load_state_dict(module.state_dict())
    seen: dict[str, torch.Tensor] = {}

    def hook(_m: torch.nn.Module, args: tuple, kwargs: dict, out: tuple) -> None:
        seen["hidden"] = args[0] if args else kwargs["hidden_states"]
        seen["output"] = out[0]

    layer.register_forward_hook(hook, with_kwargs=True)
    with torch.no_grad():
        model(inputs_embeds=x, use_cache=False)
    return seen["hidden"], seen["output"]


@pytest.mark.slow
def test_a_rotary_class_whose_rotary_attnlab_cannot_make_gets_its_models_own():
    """Beam keys its rotary frequencies by layer type (attnlab's own call fails with KeyError
    'full_attention'): fed its model's recorded call, attnlab's module returns what the same layer
    returns inside its model's own forward, to float precision."""
    from transformers.models.beam.modeling_beam import BeamModel

    module = hf_constructor("hf:beam")(64, 64, 4).eval()
    x = torch.randn(2, 8, 64, generator=torch.Generator().manual_seed(0))  # (b, num_tokens, d_in)
    hidden, expected = _models_own_call(module, BeamModel, x)
    with torch.no_grad():
        got = HUGGING_FACE_CALL.call(module, hidden).output  # (b, num_tokens, d_out)
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-6)


def test_a_class_attnlab_feeds_itself_never_builds_its_model(monkeypatch):
    """Llama's inputs attnlab makes: no owning model is built to record a call."""

    def refuse(*args, **kwargs):
        raise AssertionError("a model was built for a class attnlab feeds itself")

    monkeypatch.setattr(hf_small, "built", refuse)
    module = hf_constructor("hf:llama")(64, 64, 4).eval()
    with torch.no_grad():
        out = HUGGING_FACE_CALL.call(module, torch.randn(2, 8, 64)).output
    assert tuple(out.shape) == (2, 8, 64)


def test_the_recording_model_is_shrunk_below_the_budget_and_keeps_the_attentions_sizes():
    """Beam's config at the survey's widths has 6 billion parameters (256 experts, 151936 tokens):
    the recording model is built small, its attention sized as attnlab's module."""
    from transformers.models.beam.modeling_beam import BeamModel

    module = hf_constructor("hf:beam")(64, 64, 4)
    with torch.device("meta"):
        full = sum(p.numel() for p in BeamModel(hf_small.shrunk(module.config, 0, 0)).parameters())
    model = hf_small.built(BeamModel, module.config, 0, torch.device("cpu"), torch.float32,
                           lambda m: type(m) is type(module))
    assert full > 1e9
    assert sum(p.numel() for p in model.parameters()) < hf_small.BUDGET
    layer = next(m for m in model.modules() if type(m) is type(module))
    assert {k: v.shape for k, v in layer.state_dict().items()} == {k: v.shape for k, v in module.state_dict().items()}


@pytest.mark.slow
def test_an_input_from_outside_the_attention_is_refused_in_one_line_naming_it():
    """Muse Glimmer's assistant attends over `context_hidden_states`, another model's hidden states its
    model only projects: its model cannot be run without them, so the variant is refused as before any
    work, naming the input."""
    with pytest.raises(hf_record.OutsideInput) as caught:
        attnlab.run("hf:muse_glimmer_assistant", overrides=SIZES)
    message = str(caught.value)
    assert "MuseGlimmerAssistantAttention.forward needs 'context_hidden_states'" in message
    assert "\n" not in message


@pytest.mark.slow
@pytest.mark.parametrize("model", ["beam", "lfm3", "qwen2_5_vl_text", "glm4v_moe", "evolla", "gemma4_audio"])
def test_a_class_fed_its_models_call_runs_with_no_error_finding(model):
    result = attnlab.run(f"hf:{model}", overrides=SIZES)
    assert result.record.status == "ok", result.record.error
    assert not [f for f in result.findings if f.severity == "error"], [f.message for f in result.findings]


def test_the_recorded_call_is_the_models_for_that_shape_only():
    """Recorded per shape: the call at 8 tokens is not replayed at 5."""
    module = hf_constructor("hf:beam")(64, 64, 4).eval()
    for tokens in (8, 5):
        args, kwargs = hf_record.recorded(module, torch.randn(2, tokens, 64))
        cos, sin = kwargs["position_embeddings"]
        assert cos.shape[-2] == tokens


def test_multimodal_rotary_sections_are_rescaled_to_the_heads_attnlab_sizes():
    """Qwen2-VL's rotary splits half a head of 128 as [16, 24, 24] (its rotary class's default);
    heads of 16 rotate 8 frequencies: [2, 3, 3], 8 * 16/64, 8 * 24/64, 8 * 24/64."""
    from transformers.models.qwen2_vl.configuration_qwen2_vl import Qwen2VLTextConfig
    from transformers.models.qwen2_vl.modeling_qwen2_vl import Qwen2VLAttention

    assert hf_small.rope_at(Qwen2VLTextConfig, Qwen2VLAttention, 16)["mrope_section"] == [2, 3, 3]
    assert hf_small.rope_at(Qwen2VLTextConfig, Qwen2VLAttention, 128) is None  # its own heads: as it is
    module = hf_constructor("hf:qwen2_vl_text")(64, 64, 4)
    assert module.config.rope_parameters["mrope_section"] == [2, 3, 3]
    # HY-V4-VL's sections follow its own rotary width (qk_rope_head_dim), which the heads do not change
    from transformers.models.hy_v4_vl.configuration_hy_v4_vl import HYV4VLTextConfig

    assert hf_small.rope_at(HYV4VLTextConfig, Qwen2VLAttention, 16) is None


def test_a_model_whose_first_input_is_too_long_for_its_positions_is_recorded_from_a_shorter_one():
    """Nemotron's streaming encoder refuses 9 frames after subsampling past its max_position_embeddings
    (the run's 8 tokens): the recorder halves its features' first size and resizes from there, and
    records the model's own relative positions for the run's 8 tokens (2 * 8 - 1 of them)."""
    module = hf_constructor("hf:nemotron_asr_streaming_encoder")(64, 64, 4, context_length=8).eval()  # the run's
    assert module.config.max_position_embeddings == 8
    x = torch.randn(2, 8, 64)  # (b, num_tokens, d_in)
    args, kwargs = hf_record.recorded(module, x)
    assert kwargs["hidden_states"] is x
    assert tuple(kwargs["position_embeddings"].shape[:2]) == (2, 2 * 8 - 1)


@pytest.mark.slow
def test_a_model_that_hands_its_attention_channels_first_is_fed_x_turned():
    """SqueezeBERT's model passes its attention (batch, width, tokens): attnlab's (b, T, d) inputs go in
    turned as its model lays them out, and its context comes back as (b, T, d)."""
    module = hf_constructor("hf:squeezebert")(64, 64, 4, context_length=8).eval()
    x = torch.randn(2, 8, 64)  # (b, num_tokens, d_in)
    args, kwargs = hf_record.recorded(module, x)
    given = next(a for a in (*args, *kwargs.values()) if isinstance(a, torch.Tensor) and a.shape == (2, 64, 8))
    torch.testing.assert_close(given, x.transpose(1, 2))  # (b, d_in, num_tokens)
    with torch.no_grad():
        expected = module(x.transpose(1, 2), None, False)["context_layer"].transpose(1, 2)  # (b, num_tokens, d_out)
        got = HUGGING_FACE_CALL.call(module, x).output
    torch.testing.assert_close(got, expected)


def test_features_sized_as_the_models_own_feature_extractor_makes_them():
    """Gemma 4's audio config names no mel bins; its model flattens 128 (its feature extractor's
    default feature_size) after two stride-2 convolutions. Fed its model's call on such features,
    attnlab's module returns what the layer returns inside Gemma4AudioModel's own forward."""
    from transformers.models.gemma4.feature_extraction_gemma4 import Gemma4AudioFeatureExtractor
    from transformers.models.gemma4.modeling_gemma4 import Gemma4AudioModel

    assert Gemma4AudioFeatureExtractor().feature_size == 128
    module = hf_constructor("hf:gemma4_audio")(64, 64, 4).eval()
    config = copy.deepcopy(module.config)
    config.num_hidden_layers, config._attn_implementation = 1, "eager"
    model = Gemma4AudioModel(config).eval()
    features = torch.randn(2, 32, 128, generator=torch.Generator().manual_seed(0))  # (b, frames, mel bins)
    hidden = assert_equals_its_layer_in(model, module, lambda model: model(input_features=features))
    assert hidden.shape[-2] == 8  # 32 frames / 4


def test_a_rotary_whose_sections_its_config_leaves_unset_gets_one_the_books_rope():
    """HunYuan-VL's text rotary splits by `mrope_section`, which its default config leaves None (its
    model then fails on len(None)): one section over the half head, the book's RoPE, computed here in
    plain torch at rope_theta (token positions are the same on every axis, so any split gives this)."""
    from transformers.models.hunyuan_vl.configuration_hunyuan_vl import HunYuanVLTextConfig
    from transformers.models.hunyuan_vl.modeling_hunyuan_vl import HunYuanVLDenseV1Attention, HunYuanVLRotaryEmbedding

    assert HunYuanVLTextConfig().rope_parameters.get("mrope_section") is None
    assert hf_small.rope_at(HunYuanVLTextConfig, HunYuanVLDenseV1Attention, 16)["mrope_section"] == [8]
    config = hf_constructor("hf:hunyuan_vl_text")(64, 64, 4).config
    x = torch.randn(2, 8, 64)  # (b, num_tokens, d_in)
    cos, sin = HunYuanVLRotaryEmbedding(config)(x, torch.arange(8).expand(2, 8))  # (b, num_tokens, head_dim) each
    inv_freq = 1.0 / config.rope_parameters["rope_theta"] ** (torch.arange(0, 16, 2).float() / 16)  # (8,)
    angles = torch.arange(8).float()[:, None] * inv_freq  # (num_tokens, 8)
    torch.testing.assert_close(cos[0], torch.cat([angles, angles], -1).cos())
    torch.testing.assert_close(sin[1], torch.cat([angles, angles], -1).sin())


def test_features_as_wide_as_the_models_first_linear_layer_takes():
    """Granite Speech 5's encoder takes each mel frame with its delta, stacked in pairs: 4 x 80 wide,
    named by no config key (its feature extractor needs torchaudio). Its first linear layer's width
    is tried; fed its model's call, attnlab's module returns what the layer returns in the model."""
    from transformers.models.granite_speech5.modeling_granite_speech5 import GraniteSpeech5Encoder

    module = hf_constructor("hf:granite_speech5_encoder")(64, 64, 4, context_length=8).eval()
    config = copy.deepcopy(module.config)
    config.num_hidden_layers, config._attn_implementation = 1, "eager"
    model = GraniteSpeech5Encoder(config).eval()
    assert hf_record._first_linear_width(model) == 4 * config.num_mel_bins == 320
    features = torch.randn(2, 8, 320, generator=torch.Generator().manual_seed(0))  # (b, frames, 4 x mel bins)
    assert_equals_its_layer_in(model, module, lambda model: model(input_features=features))


@pytest.mark.slow
def test_an_image_its_model_takes_as_patches_placed_by_their_positions():
    """Gemma 4's vision model takes its image as patches (b, n, 3 x 16 x 16) with each patch's (x, y)
    (`pixel_position_ids`): 8 patches are placed on a 2 x 4 grid, and fed that call, attnlab's module
    returns what the layer returns in the model's own forward on 18 patches (3 x 6, which its pooler
    after the layers takes in 3 x 3 blocks)."""
    from transformers.models.gemma4.modeling_gemma4 import Gemma4VisionModel

    module = hf_constructor("hf:gemma4_vision")(64, 64, 4).eval()
    args, kwargs = hf_record.recorded(module, torch.randn(2, 8, 64))
    expected = [[x, y] for y in range(2) for x in range(4)]  # row by row
    assert kwargs["position_ids"].tolist() == [expected, expected]
    config = copy.deepcopy(module.config)
    config.num_hidden_layers, config._attn_implementation = 1, "eager"
    model = Gemma4VisionModel(config).eval()
    patches = torch.rand(2, 18, 3 * config.patch_size**2, generator=torch.Generator().manual_seed(0))
    positions = torch.tensor([[x, y] for y in range(3) for x in range(6)]).expand(2, 18, 2)  # (b, patches, 2)
    assert_equals_its_layer_in(model, module, lambda model: model(pixel_values=patches, pixel_position_ids=positions))


@pytest.mark.slow
@pytest.mark.parametrize("model", ["hunyuan_vl_text", "granite_speech5_encoder", "gemma4_vision"])
def test_a_model_once_refused_at_these_sizes_runs_and_a_mistake_planted_in_its_copy_is_found(model):
    """A copy of the class whose softmax normalises over the queries gives softmax_axis at the weights;
    the plant is real: on the model's own call, the copy's output differs from the class's."""
    assert_runs_clean(model, None)
    module = hf_constructor(f"hf:{model}")(64, 64, 4, context_length=8).eval()
    cls = type(module)
    planted = type(f"{cls.__name__}SoftmaxOverQueries", (cls,), {"forward": _over_queries(cls.forward)})
    args, kwargs = hf_record.recorded(module, torch.randn(2, 8, 64, generator=torch.Generator().manual_seed(0)))
    with torch.no_grad():
        assert not torch.allclose(module(*args, **kwargs)[0], planted.forward(module, *args, **kwargs)[0])
    assert ("softmax_axis", "weights") in errors(attnlab.run(planted, overrides=SIZES))


def _over_queries(forward):
    def planted(self, *args, **kwargs):
        with softmax_over_queries():
            return forward(self, *args, **kwargs)
    return planted


@pytest.mark.slow
def test_a_time_series_model_is_recorded_from_its_past_values_and_autoformers_batch_mixing_is_found():
    """Autoformer's model needs `prediction_length`, None in its config (its error names it): filled with
    the context length; it is run on a series' past values. Its attention then runs, and its eval-mode
    delay aggregation tiles each item's delays by head in the wrong order (`.repeat`, where the rows are
    item-major), so a batch item takes another's delays: found as batch_mixing, checked here in plain
    torch (the batch against each item alone)."""
    from transformers.models.autoformer.modeling_autoformer import AutoformerAttention

    attention = AutoformerAttention(embed_dim=64, num_heads=4, autocorrelation_factor=3).eval()
    x = torch.randn(2, 8, 64, generator=torch.Generator().manual_seed(0))  # (b, num_tokens, d_in)
    with torch.no_grad():
        alone = torch.cat([attention(x[i:i + 1])[0] for i in range(2)])  # (b, num_tokens, d_out)
        assert not torch.allclose(attention(x)[0], alone, atol=1e-4)
    module = hf_constructor("hf:autoformer")(64, 64, 4, context_length=8).eval()
    hf_record.recorded(module, x)
    model, _ = next(found for found in hf_record._models(module, x) if not isinstance(found, str))
    assert model.config.prediction_length == 8 and module.config.prediction_length is None
    result = attnlab.run("hf:autoformer", overrides=SIZES)
    assert errors(result) == [("batch_mixing", "output")], [f.message for f in result.findings]


def test_a_model_that_hands_its_attention_tokens_first_is_recorded_and_turned_at_the_edge():
    """XLNet's model turns its input to (tokens, batch, width) before its layers: the recorded call
    holds attnlab's (b, T, d) turned the same way, and the output is turned back. Expected from
    XLNetModel's own forward (one layer, the module's weights): what its layer returns, batch first."""
    from transformers.models.xlnet.modeling_xlnet import XLNetModel

    module = hf_constructor("hf:xlnet")(64, 64, 4).eval()
    config = copy.deepcopy(module.config)
    config.n_layer = 1
    model = XLNetModel(config).eval()
    layer = next(m for m in model.modules() if type(m) is type(module))
    layer.load_state_dict(module.state_dict())
    seen: dict[str, torch.Tensor] = {}

    def hook(_m: torch.nn.Module, args: tuple, out: tuple) -> None:
        seen["hidden"], seen["output"] = args[0], out[0]

    layer.register_forward_hook(hook)
    x = torch.randn(2, 8, 64, generator=torch.Generator().manual_seed(0))  # (b, num_tokens, d_in)
    with torch.no_grad():
        model(inputs_embeds=x)
        assert seen["hidden"].shape == (8, 2, 64)  # the model's layout: (num_tokens, b, d_in)
        got = HUGGING_FACE_CALL.call(module, seen["hidden"].transpose(0, 1)).output  # (b, num_tokens, d_out)
    torch.testing.assert_close(got, seen["output"].transpose(0, 1), rtol=1e-5, atol=1e-6)


@pytest.mark.slow
def test_a_tower_whose_positions_are_its_whole_images_is_recorded_at_its_count():
    """Llama 4's vision rotary covers its whole image's patches and a class token ((448 / 14) ** 2 + 1
    = 1025): no row of patches fits it, its full image does; attnlab's 8 tokens are refused naming that
    count, at which the model's own call is recorded."""
    from attnlab.errors import TokensNeeded

    module = hf_constructor("hf:llama4_vision_model")(64, 64, 4).eval()
    count = (module.config.image_size // module.config.patch_size) ** 2 + 1
    with pytest.raises(TokensNeeded) as caught:
        hf_record.recorded(module, torch.randn(1, 8, 64))
    assert caught.value.n_tokens == count == 1025
    x = torch.randn(1, count, 64)  # (b, num_tokens, d_in)
    args, kwargs = hf_record.recorded(module, x)
    assert any(a is x for a in (*args, *kwargs.values()))
    # its rotary's own complex frequencies, never cast to the run's real dtype
    from transformers.models.llama4.modeling_llama4 import Llama4VisionRotaryEmbedding

    expected = Llama4VisionRotaryEmbedding._compute_freqs_ci(module.config)  # (count, 1, head_dim / 2) complex
    assert kwargs["freqs_ci"].is_complex() and torch.equal(kwargs["freqs_ci"], expected)


def _maskless(cls: type[torch.nn.Module]) -> type[torch.nn.Module]:
    """A copy of `cls` that drops the mask its model hands it."""

    def forward(self, hidden_states, attention_mask=None, *args, **kwargs):
        return cls.forward(self, hidden_states, None, *args, **kwargs)

    return type(f"{cls.__name__}Maskless", (cls,), {"forward": forward})


@pytest.mark.slow
def test_the_reference_masks_as_the_models_recorded_mask_does():
    """CPM-Ant's model counts every token as context: the mask its own forward hands its attention keeps
    every key (seen by a hook on the real model), so the reference masks nothing and no mask is missing.
    A causal model's recorded mask (Qwen2.5-VL's text model) still reads causal: a copy of its class
    that drops that mask is found."""
    from transformers import CpmAntConfig, CpmAntModel
    from transformers.models.cpmant.modeling_cpmant import CpmAntAttention
    from transformers.models.qwen2_5_vl.modeling_qwen2_5_vl import Qwen2_5_VLAttention

    config = CpmAntConfig(vocab_size=600, hidden_size=64, num_attention_heads=4, dim_head=16, dim_ff=128,
                          num_hidden_layers=1)
    model = CpmAntModel(config).eval()
    seen = []
    attention = next(m for m in model.modules() if isinstance(m, CpmAntAttention))
    attention.register_forward_pre_hook(lambda _m, args: seen.append(args[2]))
    with torch.no_grad():
        model(input_ids=torch.tensor([[5, 6, 7]]))
    assert seen[0].shape == (1, 35, 35) and bool(seen[0].all())  # 32 prompt tokens and 3 ids, every key kept

    result = attnlab.run("hf:cpmant", overrides=SIZES)
    assert result.record.reference.name == "bidirectional_heads"
    assert "mask_missing" not in {f.code for f in result.findings}
    planted = attnlab.run(_maskless(Qwen2_5_VLAttention), overrides=SIZES)
    assert ("mask_missing", "scaled_scores") in {(f.code, f.stage) for f in planted.findings if f.severity == "error"}


@pytest.mark.slow
def test_a_non_finite_context_the_library_s_own_model_gives_stays_an_error():
    """Nemotron ASR streaming's attention reads its mask as a keep-mask (`masked_fill_(mask.logical_not(),
    -inf)`), but its own encoder under eager hands it the additive mask of zeros that
    create_bidirectional_mask makes there: every key hidden, its own model's output NaN (sdpa's boolean
    mask is finite). attnlab calls it as that model does, so non_finite @ context is true and stays."""
    from transformers.models.nemotron_asr_streaming.configuration_nemotron_asr_streaming import (
        NemotronAsrStreamingEncoderConfig,
    )
    from transformers.models.nemotron_asr_streaming.modeling_nemotron_asr_streaming import (
        NemotronAsrStreamingEncoder,
    )

    config = NemotronAsrStreamingEncoderConfig(hidden_size=64, num_attention_heads=4, num_hidden_layers=1,
                                               intermediate_size=128)
    features = torch.randn(2, 64, config.num_mel_bins, generator=torch.Generator().manual_seed(0))
    outputs = {}
    for implementation in ("eager", "sdpa"):
        config._attn_implementation = implementation
        torch.manual_seed(0)
        with torch.no_grad():
            outputs[implementation] = NemotronAsrStreamingEncoder(config).eval()(input_features=features)
    assert torch.isnan(outputs["eager"].last_hidden_state).any()
    assert torch.isfinite(outputs["sdpa"].last_hidden_state).all()

    result = attnlab.run("hf:nemotron_asr_streaming_encoder", overrides=SIZES)
    assert ("non_finite", "context") in errors(result)
