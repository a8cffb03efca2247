"""DETR-like attention classes (RT-DETR, D-FINE, Deformable DETR, LW-DETR) take `position_embeddings`
they add to the hidden states before the query and key projections, not a rotary (cos, sin): attnlab
makes the sine embedding such a model adds and the run names it (`added_positions`); a tower's own
hidden width tied to the model's (RT-DETR's encoder_hidden_dim beside d_model) is attnlab's d_in too.
A mistake planted in a copy (keys as queries) is still found."""

from __future__ import annotations

import math

import pytest
import torch

import attnlab

pytest.importorskip("transformers")

from transformers import RTDetrConfig  # noqa: E402
from transformers.models.rt_detr.modeling_rt_detr import RTDetrSelfAttention  # noqa: E402

from attnlab.modules import hf_call  # noqa: E402
from attnlab.modules.hf import hf_constructor  # noqa: E402
from tests.modules.hf_runs import SIZES, assert_runs_clean, errors  # noqa: E402


class RTDetrKeysAsQueries(RTDetrSelfAttention):
    """Planted: the queries made with the key projection, beside the position embeddings."""

    def forward(self, hidden_states, attention_mask=None, position_embeddings=None, **kwargs):
        b, n, _ = hidden_states.shape
        qk = hidden_states + position_embeddings
        queries, keys, values = (w(t).view(b, n, -1, self.head_dim).transpose(1, 2)
                                 for w, t in ((self.k_proj, qk), (self.k_proj, qk), (self.v_proj, hidden_states)))
        attn_weights = torch.softmax(queries @ keys.transpose(2, 3) * self.scaling, dim=-1)
        context_vec = (attn_weights @ values).transpose(1, 2).reshape(b, n, -1)  # (b, T, d)
        return self.o_proj(context_vec), attn_weights


def _sine(tokens: int, width: int) -> torch.Tensor:
    """Vaswani et al.'s sine embedding, written out: sin on the even coordinates, cos on the odd."""
    pe = torch.zeros(tokens, width)
    for t in range(tokens):
        for i in range(0, width, 2):
            pe[t, i] = math.sin(t / 10000 ** (i / width))
            pe[t, i + 1] = math.cos(t / 10000 ** (i / width))
    return pe


def _plain(module: RTDetrSelfAttention, x: torch.Tensor, pos: torch.Tensor, w_query: torch.nn.Linear) -> torch.Tensor:
    """DETR's self-attention in plain torch: queries and keys from x + pos, values from x."""
    b, n, d = x.shape
    heads = d // module.head_dim
    queries, keys, values = (w(t).view(b, n, heads, -1).transpose(1, 2)
                             for w, t in ((w_query, x + pos), (module.k_proj, x + pos), (module.v_proj, x)))
    attn_weights = torch.softmax(queries @ keys.transpose(2, 3) / math.sqrt(module.head_dim), dim=-1)
    return module.o_proj((attn_weights @ values).transpose(1, 2).reshape(b, n, d))


def test_attnlab_gives_the_sine_embedding_and_the_class_adds_it_to_queries_and_keys():
    config = RTDetrConfig(d_model=64, encoder_hidden_dim=64, num_attention_heads=4)
    config._attn_implementation = "eager"
    module = RTDetrSelfAttention(config, hidden_size=64, num_attention_heads=4).eval()
    x = torch.randn(2, 8, 64, generator=torch.Generator().manual_seed(0))
    kwargs = hf_call.forward_kwargs(module, x)
    pos = kwargs["position_embeddings"]
    assert pos.shape == (2, 8, 64)
    assert torch.allclose(pos[1], _sine(8, 64), atol=1e-5)
    with torch.no_grad():
        out = module(x, **kwargs)[0]
        assert torch.allclose(out, _plain(module, x, pos, module.q_proj), atol=1e-5)
        planted = RTDetrKeysAsQueries(config, hidden_size=64, num_attention_heads=4).eval()
        planted.load_state_dict(module.state_dict())
        assert torch.allclose(planted(x, **kwargs)[0], _plain(module, x, pos, module.k_proj), atol=1e-5)
        assert float((planted(x, **kwargs)[0] - out).abs().max()) > 1e-3


def test_the_added_positions_are_read_from_the_class_and_a_rotary_class_is_not_one():
    assert hf_call.added_positions(None) == ()
    from transformers.models.llama.modeling_llama import LlamaAttention
    from transformers.models.table_transformer.modeling_table_transformer import TableTransformerAttention

    assert hf_call.added_positions(LlamaAttention) == ()
    assert hf_call.added_positions(RTDetrSelfAttention) == ("position_embeddings",)
    assert hf_call.added_positions(TableTransformerAttention) == ("object_queries",)  # its name for them


def test_a_tower_s_hidden_width_tied_to_the_model_s_is_attnlab_s():
    module = hf_constructor("hf:rt_detr")(64, 64, 4)
    assert module.config.d_model == 64 and module.config.encoder_hidden_dim == 64
    assert module.q_proj.weight.shape == (64, 64)
    # a model with no width of its own: its encoder's and decoder's are d_in (OmDet-Turbo's)
    module = hf_constructor("hf:omdet-turbo")(64, 64, 4)
    assert module.config.encoder_hidden_dim == 64 and module.config.decoder_hidden_dim == 64
    assert module.query.weight.shape == (64, 64)
    # a width that is not a tower's hidden width keeps its default (BLIP's projection, RT-DETR's feed-forward)
    assert hf_constructor("hf:rt_detr")(64, 64, 4).config.encoder_ffn_dim == 1024


@pytest.mark.slow
@pytest.mark.parametrize("model", ["rt_detr", "d_fine", "deformable_detr", "lw_detr", "detr"])
def test_the_library_class_names_its_added_positions(model):
    assert_runs_clean(model, ("added_positions", "queries"))


@pytest.mark.slow
def test_keys_as_queries_planted_beside_the_positions_is_still_found():
    result = attnlab.run(RTDetrKeysAsQueries, overrides=SIZES)
    assert ("query_source", "queries") in errors(result), [f.message for f in result.findings]


def test_a_class_that_turns_its_input_itself_is_given_it_sequence_first_with_its_positions():
    """Mask2Former's attention permutes (T, b, d) to (b, T, d) first, as its model passes it: the
    positions are made sequence first too, and each batch item's output is plain DETR attention of
    that item (checked in plain torch), in the object queries' order, unmasked."""
    from transformers import Mask2FormerConfig
    from transformers.models.mask2former.modeling_mask2former import Mask2FormerAttention

    from attnlab.modules import hf_grid
    from attnlab.modules.built import HuggingFaceCall

    config = Mask2FormerConfig(hidden_dim=64, num_attention_heads=4)
    torch.manual_seed(0)
    module = Mask2FormerAttention(64, 4).eval()
    module.config = config
    assert hf_grid.sequence_first(module) and not hf_grid.sequence_first(RTDetrSelfAttention(config, 64, 4))
    assert hf_call.mask_kind(module) == "bidirectional"  # a detection model's queries: no order to mask by
    x = torch.rand(2, 8, 64, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        got = HuggingFaceCall().call(module, x).output
        pos = _sine(8, 64)
        b, n, d = x.shape
        queries, keys, values = (w(t).view(b, n, 4, 16).transpose(1, 2) for w, t in
                                 ((module.q_proj, x + pos), (module.k_proj, x + pos), (module.v_proj, x)))
        attn_weights = torch.softmax(queries @ keys.transpose(2, 3) / 4.0, dim=-1)
        plain = module.out_proj((attn_weights @ values).transpose(1, 2).reshape(b, n, d))
    torch.testing.assert_close(got, plain, atol=1e-5, rtol=1e-5)


@pytest.mark.slow
@pytest.mark.parametrize("model", ["mask2former", "table-transformer"])  # sequence first; `object_queries`
def test_the_library_class_under_other_names_and_layouts_names_its_added_positions(model):
    assert_runs_clean(model, ("added_positions", "queries"))


@pytest.mark.slow
def test_a_model_whose_widths_are_its_towers_runs_clean():
    assert_runs_clean("omdet-turbo", None)  # queries, keys and values given apart, as nn.MultiheadAttention's


class _TurnsForTorch(torch.nn.Module):
    """Turns its (b, T, d) input to (T, b, d) for a torch attention that is not batch first: the
    same permute as Mask2Former's, the other way; it is called batch first."""

    def __init__(self) -> None:
        super().__init__()
        self.attn = torch.nn.MultiheadAttention(64, 4)

    def forward(self, hidden_states):
        hidden_states = hidden_states.permute(1, 0, 2)
        length, batch_size, width = hidden_states.size()
        return self.attn(hidden_states, hidden_states, hidden_states)[0].permute(1, 0, 2)


def test_a_class_turning_its_input_for_a_torch_attention_is_not_sequence_first():
    from attnlab.modules import hf_grid

    assert not hf_grid.sequence_first(_TurnsForTorch())
