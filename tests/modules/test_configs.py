"""A config whose own validator refuses attnlab's sizes beside one of its own values: built
consistently where its own defaults tie the values, refused in one line where nothing does."""

from __future__ import annotations

import pytest

pytest.importorskip("transformers")

from attnlab.modules.configs import ConfigError  # noqa: E402
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
