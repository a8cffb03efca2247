"""A config whose own validator refuses attnlab's sizes beside one of its own values: built
consistently where its own defaults tie the values, refused in one line where nothing does."""

from __future__ import annotations

import pytest

pytest.importorskip("transformers")

from attnlab.modules.configs import ConfigError, tied  # noqa: E402
from attnlab.modules.hf import hf_constructor  # noqa: E402


def test_another_spelling_of_a_size_the_validator_refuses_keeps_the_config_s_own_value():
    # DAB-DETR's query_dim (a box's 4 coordinates) is a spelling of d_in; its validator requires 4
    from transformers import DabDetrConfig

    config = hf_constructor("hf:dab-detr")(64, 64, 4).config
    assert config.query_dim == DabDetrConfig().query_dim == 4 and config.hidden_size == 64


def test_a_width_the_defaults_tie_to_the_size_is_set_alike():
    # WavTokenizer's codebook_dim must equal its hidden_size (both 512 by default)
    from transformers import WavTokenizerConfig

    default = WavTokenizerConfig()
    assert default.codebook_dim == default.hidden_size == 512
    config = hf_constructor("hf:wavtokenizer")(64, 64, 4).config
    assert config.codebook_dim == config.hidden_size == 64


def test_a_config_refused_either_way_is_a_one_line_error():
    with pytest.raises(ConfigError, match="Kolibri1_1Config refused the values") as caught:
        hf_constructor("hf:kolibri1_1")(64, 64, 4, index_num_heads=5)  # more than the 4 // 4 its validator allows
    assert "\n" not in str(caught.value)


def test_widths_a_model_ties_to_the_size_its_config_leaves_alone_are_tied():
    """SqueezeBERT's config accepts hidden_size 64 beside its embedding_size 768, which its model
    refuses (they are tied, both 768 by default); Reformer's axial_pos_embds_dim (64, 192) must sum
    to its hidden_size (256 by default): `tied` sets each to attnlab's size, scaled where summed."""
    from transformers import ReformerModel, SqueezeBertModel

    squeeze = hf_constructor("hf:squeezebert")(64, 64, 4).config
    assert squeeze.embedding_size == 768
    assert tied(squeeze).embedding_size == 64 and tied(squeeze).hidden_size == 64
    SqueezeBertModel(tied(squeeze))  # its own check of the tie passes
    reformer = hf_constructor("hf:reformer")(64, 64, 4).config
    assert tuple(tied(reformer).axial_pos_embds_dim) == (64 * 64 // 256, 192 * 64 // 256)  # (16, 48): sums to 64
    ReformerModel(tied(reformer))
    # BERT's widths tie nothing to its hidden size: nothing to change
    assert tied(hf_constructor("hf:bert")(64, 64, 4).config) is None


def test_an_empty_rope_parameters_takes_transformers_documented_default():
    """CohereCompass's text config leaves rope_parameters {} (its own rotary class then fails with
    KeyError 'full_attention'): filled with the default rotary at rope_theta 10000.0, transformers'
    documented `default_theta`, for each of its layer types; its model then builds."""
    from transformers import CohereCompassTextConfig
    from transformers.models.cohere_compass.modeling_cohere_compass import CohereCompassTextModel

    assert CohereCompassTextConfig().rope_parameters == {}
    config = hf_constructor("hf:cohere_compass_text")(64, 64, 4).config
    assert config.rope_parameters == {"full_attention": {"rope_type": "default", "rope_theta": 10000.0}}
    CohereCompassTextModel(config)


def test_a_context_length_its_validator_ties_to_a_size_of_its_own_keeps_the_configs_larger_one():
    """Granite Speech 5's encoder requires context_size <= max_position_embeddings (128 <= 512 by
    default); the run's 8 tokens as its max_position_embeddings would break that tie: its own 512 is
    kept (the 8 tokens fit in it), its block of 128 and its model's relative distances with it."""
    from transformers import GraniteSpeech5Encoder, GraniteSpeech5EncoderConfig

    default = GraniteSpeech5EncoderConfig()
    with pytest.raises(ValueError, match="context_size"):
        GraniteSpeech5EncoderConfig(max_position_embeddings=8)
    config = hf_constructor("hf:granite_speech5_encoder")(64, 64, 4, context_length=8).config
    assert (config.max_position_embeddings, config.context_size) == (default.max_position_embeddings,
                                                                      default.context_size) == (512, 128)
    config.num_hidden_layers = 1
    dists = GraniteSpeech5Encoder(config).attention_dists  # every distance a row of its relative table
    assert 0 <= int(dists.min()) and int(dists.max()) < 2 * config.max_position_embeddings + 1
