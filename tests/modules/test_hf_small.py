"""The small owning model a Hugging Face attention's call is recorded from (attnlab.modules.hf_small):
shrunk only where its config stays consistent. Expected values come from the model's own forward:
a hook on its attention layer keeps what the layer was given and what it returned."""

from __future__ import annotations

import copy
import importlib.util

import pytest
import torch
from torch import nn

import attnlab

pytest.importorskip("transformers")

from transformers import DabDetrConfig  # noqa: E402
from transformers.models.cohere_compass.modeling_cohere_compass import CohereCompassAttention  # noqa: E402
from transformers.models.dab_detr.modeling_dab_detr import DabDetrAttention, DabDetrModel  # noqa: E402
from transformers.models.step3p7.modeling_step3p7 import Step3p7Attention  # noqa: E402

from attnlab.modules import hf_small  # noqa: E402
from attnlab.modules.hf import hf_constructor  # noqa: E402
from tests.modules.hf_runs import SIZES, assert_equals_its_layer_in, assert_runs_clean, errors  # noqa: E402


class _Previous(nn.Linear):
    """The projection of the previous token's row: each token's query is its neighbour's."""

    def forward(self, x):
        return super().forward(torch.roll(x, 1, dims=-2))


class Step3p7PreviousQueries(Step3p7Attention):
    """Planted: q_proj of the previous token's row."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.q_proj.__class__ = _Previous


class CohereCompassPreviousQueries(CohereCompassAttention):
    """Planted: q_proj of the previous token's row."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.q_proj.__class__ = _Previous


def test_a_vocabulary_the_config_leaves_unset_is_the_small_one_and_the_class_gets_its_models_call():
    """ESM's config leaves vocab_size to a checkpoint (None: its model cannot be built); the
    recording model takes the small vocabulary, and attnlab's module, fed that model's call,
    returns what the same layer returns inside EsmModel's own forward."""
    from transformers.models.esm.modeling_esm import EsmModel

    module = hf_constructor("hf:esm")(64, 64, 4).eval()
    assert module.config.vocab_size is None
    assert hf_small.shrunk(module.config, 0, 2).vocab_size == hf_small.VOCAB
    config = copy.deepcopy(module.config)
    config.vocab_size, config.num_hidden_layers, config._attn_implementation = 33, 1, "eager"
    model = EsmModel(config, add_pooling_layer=False).eval()
    x = torch.randn(2, 8, 64, generator=torch.Generator().manual_seed(0))  # (b, num_tokens, d_in)
    assert_equals_its_layer_in(model, module, lambda model: model(inputs_embeds=x))


def test_a_depth_a_per_layer_list_ties_keeps_its_own_value():
    """SEW-D's num_feat_extract_layers is its conv_dim's length (13): cut to 1 beside 13 widths, its
    model's feature norm (conv_dim[-1] = 512 wide) met 64 features. Kept, the model runs."""
    from transformers.models.sew_d.modeling_sew_d import SEWDModel

    module = hf_constructor("hf:sew-d")(64, 64, 4)
    small = hf_small.shrunk(module.config, 0, 2)
    assert small.num_feat_extract_layers == len(small.conv_dim) == 13
    assert small.num_hidden_layers == 1
    model = SEWDModel(small).eval()
    with torch.no_grad():
        out = model(input_values=torch.randn(1, 1600)).last_hidden_state
    assert out.shape[-1] == 64 and torch.isfinite(out).all()


def test_a_window_the_config_leaves_unset_where_no_layer_slides_is_its_whole_context():
    """Step3.7's config leaves sliding_window None with no sliding layer, yet its model builds the
    sliding mask (ValueError): the recording model's window is its whole context, which masks
    nothing, and attnlab's module, fed that model's call, returns what the layer returns inside the
    model's own forward with a window the test sets as long as the 8 tokens."""
    from transformers.models.step3p7.modeling_step3p7 import Step3p7TextModel

    module = hf_constructor("hf:step3p7")(64, 64, 4).eval()
    assert module.config.sliding_window is None and "sliding_attention" not in module.config.layer_types
    small = hf_small.shrunk(module.config, 0, 1)
    assert small.sliding_window == small.max_position_embeddings
    config = copy.deepcopy(small)
    config.sliding_window = 8  # the run's tokens: masks nothing
    model = Step3p7TextModel(config).eval()
    x = torch.randn(2, 8, 64, generator=torch.Generator().manual_seed(0))  # (b, num_tokens, d_in)
    assert_equals_its_layer_in(model, module, lambda model: model(inputs_embeds=x, use_cache=False))


def test_the_planted_mistakes_are_real():
    """Independently of attnlab: each planted copy, given the library class's weights, computes
    other outputs than the library class on the same inputs and rotation."""
    x = torch.rand(1, 8, 64, generator=torch.Generator().manual_seed(0))  # (b, num_tokens, d_in)
    angles = torch.rand(8, 8, generator=torch.Generator().manual_seed(1)) * 3
    angles = torch.cat([angles, angles], dim=-1)[None]  # (1, num_tokens, head_dim)
    for library, planted, model in ((Step3p7Attention, Step3p7PreviousQueries, "hf:step3p7"),
                                    (CohereCompassAttention, CohereCompassPreviousQueries, "hf:cohere_compass_text")):
        config = hf_constructor(model)(64, 64, 4).config
        original, wrong = library(config, 0).eval(), planted(config, 0).eval()
        wrong.load_state_dict(original.state_dict())
        kwargs = {"position_embeddings": (angles.cos(), angles.sin()), "attention_mask": None}
        with torch.no_grad():
            assert (wrong(x, **kwargs)[0] - original(x, **kwargs)[0]).abs().max() > 1e-3, library.__name__


@pytest.mark.slow
@pytest.mark.parametrize(("model", "declared"), [("esm", None), ("sew-d", None), ("step3p7", ("rotary", "queries")),
                                                 ("cohere_compass_text", ("rotary", "queries"))])
def test_a_class_whose_model_is_built_consistently_runs_with_no_error_finding(model, declared):
    assert_runs_clean(model, declared)


@pytest.mark.slow
@pytest.mark.parametrize("planted", [Step3p7PreviousQueries, CohereCompassPreviousQueries])
def test_a_mistake_planted_in_a_subclass_is_still_found(planted):
    result = attnlab.run(planted, overrides=SIZES)
    assert "queries" in {stage for _, stage in errors(result)}, [f.message for f in result.findings]


def test_a_sub_config_gets_what_its_composite_sets_on_it():
    """T5Gemma2's decoder config has no dropout_rate of its own (T5Gemma2Config sets it), which its
    decoder model reads: the recording model's config is given the composite's default."""
    from transformers.models.t5gemma2.configuration_t5gemma2 import T5Gemma2Config, T5Gemma2DecoderConfig
    from transformers.models.t5gemma2.modeling_t5gemma2 import T5Gemma2Decoder

    config = T5Gemma2DecoderConfig()
    assert "dropout_rate" not in vars(config)
    given = hf_small.completed(config)
    assert given.dropout_rate == T5Gemma2Config().decoder.dropout_rate and "dropout_rate" not in vars(config)
    with torch.device("meta"):
        T5Gemma2Decoder(hf_small.shrunk(given, 0, 2))  # builds; from `config` it raises AttributeError
        with pytest.raises(AttributeError, match="dropout_rate"):
            T5Gemma2Decoder(hf_small.shrunk(config, 0, 2))


@pytest.mark.skipif(importlib.util.find_spec("timm") is not None, reason="timm installed: its backbone is buildable")
def test_a_timm_backbone_is_transformers_own_resnet_where_timm_is_missing():
    config = DabDetrConfig(d_model=64, encoder_attention_heads=4, decoder_attention_heads=4)
    assert config.backbone_config.model_type == "timm_backbone"
    with pytest.raises(ImportError):  # transformers' own build of its default fails without timm
        DabDetrModel(config)
    small = hf_small.shrunk(config, 0, 2)
    assert small.backbone_config.model_type == "resnet"
    assert list(small.backbone_config.out_indices) == [1, 2, 3, 4]
    assert config.backbone_config.model_type == "timm_backbone"  # the caller's config is left as it was
    model = hf_small.built(DabDetrModel, config, 0, torch.device("cpu"), torch.float32,
                           lambda m: isinstance(m, DabDetrAttention))
    assert any(type(m).__name__ == "ResNetBackbone" for m in model.modules())
    assert not getattr(model.config, "use_pretrained_backbone", False)
