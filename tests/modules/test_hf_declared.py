"""What a library's attention class declares by its own structure, read from the class and never
reported as an error: a class that takes no mask attends both ways, an output projection under any
name the library gives it, a norm between the context and the output projection, a scale its
constructor sets or its code never applies, a position bias on top of that scale. For each, the
library's class gives no error finding and a mistake planted in a subclass is still found at its stage."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import attnlab

pytest.importorskip("transformers")

from transformers.models.bark.modeling_bark import BarkSelfAttention  # noqa: E402
from transformers.models.blip_2.modeling_blip_2 import Blip2Attention  # noqa: E402
from transformers.models.gpt_neo.modeling_gpt_neo import GPTNeoSelfAttention  # noqa: E402
from transformers.models.kosmos2.modeling_kosmos2 import KosmosTextAttention  # noqa: E402
from transformers.models.mgp_str.modeling_mgp_str import MgpstrAttention  # noqa: E402
from transformers.models.pix2struct.modeling_pix2struct import (  # noqa: E402
    Pix2StructTextAttention,
    Pix2StructVisionAttention,
)


def codes(result) -> set[tuple[str, str]]:
    return {(f.code, f.stage) for f in result.findings}


class _Doubled(nn.Linear):
    def forward(self, x):
        return 2 * super().forward(x)


class MgpstrUnscaled(MgpstrAttention):
    """Planted in a class whose forward takes no mask: the scores left unscaled."""

    def __init__(self, config):
        super().__init__(config)
        self.scale = 1.0


class Blip2DoubledProjection(Blip2Attention):
    """Planted after the context: the output projection (named `projection`) doubles its result."""

    def __init__(self, config):
        super().__init__(config)
        self.projection.__class__ = _Doubled


class KosmosHalfScale(KosmosTextAttention):
    """Planted in a class with a LayerNorm before its output projection: the scores scaled by 0.5."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.scaling = 0.5


class Pix2StructVisionScaled(Pix2StructVisionAttention):
    """Planted: the scores scaled by 0.5 where the library's class sets scaling = 1.0."""

    def __init__(self, config):
        super().__init__(config)
        self.scaling = 0.5


class Pix2StructTextHalfScale(Pix2StructTextAttention):
    """Planted under a relative position bias: the scores scaled by 0.5 where the class sets 1.0."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.scaling = 0.5


class BarkDoubledValues(BarkSelfAttention):
    """Planted in a class whose fused projection is named by no role (att_proj): its output doubled."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.out_proj.__class__ = _Doubled


class GPTNeoScaled(GPTNeoSelfAttention):
    """Planted in a class that applies no scale: the queries doubled (the scores twice the library's)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.q_proj.__class__ = _Doubled


def test_a_fused_projection_no_name_declares_is_read_by_its_shape():
    from transformers.models.bark.configuration_bark import BarkSubModelConfig

    from attnlab.modules.roles import module_roles

    roles = module_roles(BarkSelfAttention(BarkSubModelConfig(hidden_size=64, num_heads=4)))
    assert roles == {"att_proj.weight": "qkv", "att_proj.bias": "qkv", "out_proj.weight": "out",
                     "out_proj.bias": "out"}


def test_the_planted_mistakes_are_real():
    """Independently of attnlab: each planted copy computes other outputs than its library class."""
    from transformers import Blip2VisionConfig, GPTNeoConfig

    x = torch.rand(1, 8, 64, generator=torch.Generator().manual_seed(0))
    config = Blip2VisionConfig(hidden_size=64, num_attention_heads=4)
    neo = GPTNeoConfig(hidden_size=64, num_heads=4, attention_types=[[["global"], 1]], num_layers=1)
    for original, planted in [(Blip2Attention(config), Blip2DoubledProjection(config)),
                              (GPTNeoSelfAttention(neo, "global"), GPTNeoScaled(neo, "global"))]:
        planted.load_state_dict(original.state_dict())
        with torch.no_grad():
            assert (planted.eval()(x)[0] - original.eval()(x)[0]).abs().max() > 1e-3
    assert "scale" not in "".join(line.split("#")[0] for line in
                                  __import__("inspect").getsource(GPTNeoSelfAttention).splitlines())


@pytest.mark.slow
@pytest.mark.parametrize(("model", "declared"), [
    ("mgp-str", None),  # its forward takes no mask: compared with a bidirectional reference
    ("blip_vision_model", None),
    ("blip_2_vision_model", None),  # its output projection is `projection`
    ("internvl_vision", None),  # ...`projection_layer`
    ("kosmos_2_5_vision_model", None),  # ...`output`
    ("kosmos_2_text_model", ("not_observable", "output")),  # a LayerNorm between its context and its out_proj
    ("pix2struct_vision_model", ("declared_scale", "scaled_scores")),  # scaling = 1.0 over key_value_proj_dim heads
    ("pix2struct_text_model", ("position_bias", "scaled_scores")),  # a relative bias on unscaled scores
    ("gpt_neo", ("declared_scale", "scaled_scores")),  # its code applies no scale
    ("bark", None),  # att_proj (3 * d, d): a fused query-key-value projection by its shape
])
def test_the_library_class_gives_no_error_finding(model, declared):
    result = attnlab.run(f"hf:{model}", overrides=SIZES)
    assert errors(result) == [], [f.message for f in result.findings]
    if declared:
        assert declared in codes(result), [f.message for f in result.findings]


@pytest.mark.slow
@pytest.mark.parametrize(("planted", "expected"), [
    (MgpstrUnscaled, ("scaling", "scaled_scores")),
    (Blip2DoubledProjection, ("output_path", "output")),
    (KosmosHalfScale, ("scaling", "scaled_scores")),
    (Pix2StructVisionScaled, ("scaling", "scaled_scores")),
    (Pix2StructTextHalfScale, ("scaling", "scaled_scores")),
    (GPTNeoScaled, ("scaling", "scaled_scores")),
    (BarkDoubledValues, ("output_path", "output")),
])
def test_a_mistake_planted_in_a_subclass_is_still_found(planted, expected):
    result = attnlab.run(planted, overrides=SIZES)
    assert expected in errors(result), [f.message for f in result.findings]


from transformers.models.prophetnet.modeling_prophetnet import ProphetNetAttention  # noqa: E402
from transformers.models.xlm.modeling_xlm import MultiHeadAttention as XLMAttention  # noqa: E402


class XLMCausal(XLMAttention):
    """XLM's attention declared causal (as in a model with config.causal = True): its mask keeps the past."""

    is_causal = True


class XLMCausalUnmasked(XLMCausal):
    """Planted in a causal XLM: the mask it is given replaced by one that keeps every key."""

    def forward(self, input, mask, *args, **kwargs):
        return super().forward(input, torch.ones_like(mask), *args, **kwargs)


class ProphetNetCausal(ProphetNetAttention):
    """Planted in an encoder attention whose mask only pads: the future hidden as a decoder's would be."""

    def forward(self, hidden_states, *args, attention_mask=None, **kwargs):
        tokens = hidden_states.shape[1]
        future = torch.full((tokens, tokens), torch.finfo(hidden_states.dtype).min).triu(1)
        original = torch.einsum
        torch.einsum = lambda spec, *ops: original(spec, *ops) + future if spec == "bsij,bsjk->bsik" and \
            ops[1].shape[-1] == tokens and ops[0].shape[-1] != tokens else original(spec, *ops)
        try:
            return super().forward(hidden_states, *args, attention_mask=attention_mask, **kwargs)
        finally:
            torch.einsum = original


def test_the_model_s_mask_of_a_class_reading_ones_as_keep():
    """Independently of attnlab: XLM's attention keeps where its mask is 1 ((b, T, T), as its model's
    get_masks makes it), so a lower-triangular mask of ones hides the future and a full one nothing."""
    from transformers import XLMConfig

    config = XLMConfig(emb_dim=64, n_heads=4)
    x = torch.rand(2, 8, 64, generator=torch.Generator().manual_seed(0))
    attention = XLMAttention(4, 64, config).eval()
    keep = torch.ones(2, 8, 8, dtype=torch.long)
    with torch.no_grad():
        causal = attention(x, keep.tril(), output_attentions=True)[1]
        full = attention(x, keep, output_attentions=True)[1]
    assert float(causal[..., 0, 1:].abs().max()) == 0.0  # the first token sees only itself
    assert float(full[..., 0, 1:].min()) > 0.0
    from transformers import ProphetNetConfig

    prophet = ProphetNetConfig(hidden_size=64, num_encoder_attention_heads=4)
    library = ProphetNetAttention(prophet, 4).eval()
    planted = ProphetNetCausal(prophet, 4).eval()
    planted.load_state_dict(library.state_dict())
    with torch.no_grad():
        assert float((planted(x)[0] - library(x)[0]).abs().max()) > 1e-3


@pytest.mark.slow
@pytest.mark.parametrize("model", ["xlm", "flaubert", "prophetnet"])
def test_a_class_given_its_model_s_mask_in_its_own_form_gives_no_error_finding(model):
    result = attnlab.run(f"hf:{model}", overrides=SIZES)  # XLM's (b, T, T) ones; ProphetNet's pads only
    assert errors(result) == [], [f.message for f in result.findings]


@pytest.mark.slow
def test_a_causal_xlm_keeps_its_mask_and_a_dropped_one_is_found():
    assert errors(attnlab.run(XLMCausal, overrides=SIZES)) == []
    result = attnlab.run(XLMCausalUnmasked, overrides=SIZES)
    assert ("mask_missing", "scaled_scores") in errors(result), [f.message for f in result.findings]


@pytest.mark.slow
def test_a_future_hidden_in_an_encoder_attention_is_found():
    """Compared with the library class's bidirectional attention (read from the library's class, not
    the copy): a causal mask it does not have is named, as a mask the reference lacks."""
    result = attnlab.run(ProphetNetCausal, overrides=SIZES)
    assert ("masked", "scaled_scores") in codes(result), [f.message for f in result.findings]


from transformers.models.fsmt.modeling_fsmt import Attention as FSMTAttention  # noqa: E402

from tests.modules.hf_runs import SIZES, errors  # noqa: E402


class FSMTUnmasked(FSMTAttention):
    """Planted in a sequence-first class whose mask is added to its scores: the mask it is given dropped."""

    def forward(self, query, key, *args, attn_mask=None, **kwargs):
        return super().forward(query, key, *args, **kwargs)


def test_fsmt_reads_its_input_sequence_first_and_adds_its_mask():
    """Independently of attnlab: FSMT's attention takes (T, b, d) and adds its attn_mask to the scores,
    so an additive causal mask changes its output and the dropped one of the planted copy is real."""
    x = torch.rand(8, 2, 64, generator=torch.Generator().manual_seed(0))  # (T, b, d)
    attention = FSMTAttention(64, 4).eval()
    causal = torch.full((8, 8), torch.finfo(x.dtype).min).triu(1)  # (T, T) 0 keep, min drop
    with torch.no_grad():
        masked = attention(x, None, attn_mask=causal)[0]
        assert masked.shape == (8, 2, 64)
        assert float((masked - attention(x, None)[0]).abs().max()) > 1e-3
        first = attention(x[:1], None)[0]  # the first token alone sees only itself, as under the mask
        assert float((masked[:1] - first).abs().max()) < 1e-5


@pytest.mark.slow
def test_a_sequence_first_class_with_an_added_mask_gives_no_error_and_a_dropped_one_is_found():
    assert errors(attnlab.run("hf:fsmt", overrides=SIZES)) == []
    result = attnlab.run(FSMTUnmasked, overrides=SIZES)
    assert ("mask_missing", "scaled_scores") in errors(result), [f.message for f in result.findings]
