"""A term a library's class adds to its own scores (ViTS's and Wav2Vec2-BERT's relative-position
logits, Doge's dynamic mask, WavLM's gated bias) is no scale: the factor on the scores is read from
the class's operations, the term named as info (`score_terms`). A class that scales its queries and
its keys each (OpenAI's privacy filter, head_dim ** -0.25 on both) declares the product. For each,
the library's class gives no error finding and a wrong scale planted in a subclass is still found."""

from __future__ import annotations

import pytest
import torch

import attnlab

pytest.importorskip("transformers")

from transformers.models.cpmant.modeling_cpmant import CpmAntAttention  # noqa: E402
from transformers.models.doge.modeling_doge import DogeAttention, DogeRotaryEmbedding  # noqa: E402
from transformers.models.openai_privacy_filter.modeling_openai_privacy_filter import (  # noqa: E402
    OpenAIPrivacyFilterAttention,
    OpenAIPrivacyFilterRotaryEmbedding,
)
from transformers.models.vits.modeling_vits import VitsAttention  # noqa: E402
from transformers.models.wav2vec2_bert.modeling_wav2vec2_bert import Wav2Vec2BertSelfAttention  # noqa: E402

from tests.modules.hf_runs import SIZES, assert_runs_clean, errors  # noqa: E402


class VitsHalfScale(VitsAttention):
    """Planted under relative-position logits: the queries scaled by 0.5, not 1/sqrt(head_dim)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.scaling = 0.5


class Wav2Vec2BertHalfScale(Wav2Vec2BertSelfAttention):
    """Planted under relative-key logits: the scores scaled by 0.5."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.scaling = 0.5


class DogeHalfScale(DogeAttention):
    """Planted under its dynamic mask: the scores scaled by 0.5."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.scaling = 0.5


class PrivacyFilterScaledTwice(OpenAIPrivacyFilterAttention):
    """Planted: 1/sqrt(head_dim) on each side, the scores scaled by 1/head_dim in all."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.scaling = self.head_dim ** -0.5


class CpmAntHalfQueries(CpmAntAttention):
    """Planted under the position bias its model hands it: the queries halved, the scores scaled by 0.5 more."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.project_q.register_forward_hook(lambda _module, _args, out: 0.5 * out)


def _outputs(original, planted, x, **kwargs) -> float:
    planted.load_state_dict(original.state_dict())
    with torch.no_grad():
        return float((planted.eval()(x, **kwargs)[0] - original.eval()(x, **kwargs)[0]).abs().max())


def test_the_planted_scales_are_real():
    """Independently of attnlab: each planted copy computes other outputs than its library class,
    and the privacy filter's two factors make 1/sqrt(head_dim) on the scores."""
    from transformers import CpmAntConfig, DogeConfig, OpenAIPrivacyFilterConfig, VitsConfig, Wav2Vec2BertConfig

    torch.manual_seed(0)
    x = torch.rand(2, 8, 64, generator=torch.Generator().manual_seed(0))
    vits = VitsConfig(hidden_size=64, num_attention_heads=4)
    w2v = Wav2Vec2BertConfig(hidden_size=64, num_attention_heads=4)
    assert _outputs(VitsAttention(vits), VitsHalfScale(vits), x) > 1e-3
    assert _outputs(Wav2Vec2BertSelfAttention(w2v), Wav2Vec2BertHalfScale(w2v), x) > 1e-3
    position_ids = torch.arange(8)[None].expand(2, -1)
    doge = DogeConfig(hidden_size=64, num_attention_heads=4, num_key_value_heads=4)
    doge._attn_implementation = "eager"
    rope = DogeRotaryEmbedding(doge)(x, position_ids)
    assert _outputs(DogeAttention(doge, 0), DogeHalfScale(doge, 0), x, position_embeddings=rope) > 1e-3
    opf = OpenAIPrivacyFilterConfig(hidden_size=64, num_attention_heads=4, num_key_value_heads=4, head_dim=16)
    opf._attn_implementation = "eager"
    rope = OpenAIPrivacyFilterRotaryEmbedding(opf)(x, position_ids)
    original = OpenAIPrivacyFilterAttention(opf)
    torch.nn.init.normal_(original.sinks)
    assert _outputs(original, PrivacyFilterScaledTwice(opf), x, position_embeddings=rope) > 1e-3
    assert original.scaling ** 2 == pytest.approx(16 ** -0.5)
    cpmant = CpmAntConfig(hidden_size=64, num_attention_heads=4, dim_head=16)
    keep, bias = torch.ones(2, 8, 8, dtype=torch.bool), torch.randn(2, 4, 8, 8, generator=torch.Generator().manual_seed(1))
    assert _outputs(CpmAntAttention(cpmant), CpmAntHalfQueries(cpmant), x, hidden_kv=x, attention_mask=keep,
                    position_bias=bias) > 1e-3


@pytest.mark.slow
@pytest.mark.parametrize(("model", "declared"), [
    ("vits", ("score_terms", "scaled_scores")),  # relative-position logits added to the pre-scaled scores
    ("wav2vec2-bert", ("score_terms", "scaled_scores")),  # relative-key logits, through eager attention
    ("doge", ("score_terms", "scaled_scores")),  # its dynamic mask, computed from its values
    ("wavlm", ("score_terms", "scaled_scores")),  # a gated position bias, as nn.MultiheadAttention's float mask
    ("granite_speech_encoder", None),  # Shaw's relative logits as SDPA's float mask
    ("openai_privacy_filter", None),  # head_dim ** -0.25 on queries and keys each
    ("cpmant", ("score_terms", "scaled_scores")),  # the segment-relative position_bias its model hands it
])
def test_the_library_class_gives_no_error_finding(model, declared):
    assert_runs_clean(model, declared)


@pytest.mark.slow
@pytest.mark.parametrize("planted", [VitsHalfScale, Wav2Vec2BertHalfScale, DogeHalfScale, PrivacyFilterScaledTwice,
                                     CpmAntHalfQueries])
def test_a_wrong_scale_planted_under_the_term_is_still_found(planted):
    result = attnlab.run(planted, overrides=SIZES)
    assert ("scaling", "scaled_scores") in errors(result), [f.message for f in result.findings]
