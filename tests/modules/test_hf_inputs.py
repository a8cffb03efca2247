"""The inputs a Hugging Face model makes for its attention, made by attnlab as the model makes them:
BLOOM's residual and ALiBi, a packed vision tower's cu_seqlens, a convolutional attention's grid,
Gemma 4's shared key/value states. The expected numbers come from the classes called directly."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import attnlab
from attnlab.errors import UserError
from tests.modules.hf_runs import SIZES

pytest.importorskip("transformers")

from transformers import BloomConfig  # noqa: E402
from transformers.models.bloom.modeling_bloom import BloomAttention, build_alibi_tensor  # noqa: E402
from transformers.models.qwen3_vl.configuration_qwen3_vl import Qwen3VLVisionConfig  # noqa: E402
from transformers.models.qwen3_vl.modeling_qwen3_vl import Qwen3VLVisionAttention  # noqa: E402

from attnlab.modules import hf_inputs  # noqa: E402
from attnlab.modules.built import HuggingFaceCall  # noqa: E402


@pytest.mark.slow
@pytest.mark.parametrize("model", ["bloom", "glm4v_vision", "qwen3_vl_vision", "qwen3_5_vision", "cosmos3_edge_vision",
                                   "hunyuan_vl_vision", "video_llama_3_vision", "gemma4_text", "canine"])
def test_a_class_whose_forward_needs_what_its_model_makes_runs_without_an_error_finding(model):
    result = attnlab.run(f"hf:{model}", overrides=SIZES)
    assert result.record.status == "ok", result.record.error
    assert not [f for f in result.findings if f.severity == "error"], [f.message for f in result.findings]


def test_blooms_residual_is_zero_so_the_output_is_the_attentions_own():
    """BLOOM adds `residual` after its output projection: attnlab's call gives the output with a
    residual r minus r, the same alibi and mask as the model file builds them."""
    config = BloomConfig(hidden_size=64, n_head=4)
    config._attn_implementation = "eager"
    torch.manual_seed(0)
    module = BloomAttention(config, 0).eval()
    module.config = config
    x = torch.rand(2, 8, 64, generator=torch.Generator().manual_seed(0))
    r = torch.rand(2, 8, 64, generator=torch.Generator().manual_seed(1))
    alibi = build_alibi_tensor(torch.ones(2, 8, dtype=torch.long), 4, x.dtype)  # (b * heads, 1, T)
    causal = torch.triu(torch.full((8, 8), torch.finfo(x.dtype).min), diagonal=1).expand(2, 1, 8, 8)
    with torch.no_grad():
        expected = module(x, r, alibi, causal)[0] - r
        args, kwargs = HuggingFaceCall().arguments(module, x)
        got = module(*args, **kwargs)[0]
    torch.testing.assert_close(got, expected)


def test_a_packed_vision_tower_keeps_each_batch_item_its_own_sequence():
    """Two batch items packed as two sequences of cu_seqlens: each item's output is the module's on
    that item alone (cu_seqlens [0, T]) with the book's RoPE at head_dim, computed here."""
    config = Qwen3VLVisionConfig(hidden_size=64, num_heads=4)
    config._attn_implementation = "eager"
    torch.manual_seed(0)
    module = Qwen3VLVisionAttention(config).eval()
    x = torch.rand(2, 8, 64, generator=torch.Generator().manual_seed(0))
    inv_freq = 1.0 / 10_000 ** (torch.arange(0, 16, 2).float() / 16)  # (hs / 2,)
    angles = torch.arange(8).float()[:, None] * inv_freq  # (T, hs / 2)
    emb = torch.cat([angles, angles], dim=-1)  # (T, hs)
    with torch.no_grad():
        got = HuggingFaceCall().call(module, x).output
        alone = [module(x[i], cu_seqlens=torch.tensor([0, 8], dtype=torch.int32),
                        position_embeddings=(emb.cos(), emb.sin())) for i in range(2)]
    assert got.shape == (2, 8, 64)
    torch.testing.assert_close(got, torch.stack(alone))


class _Grid(nn.Module):
    def __init__(self, with_cls_token: bool) -> None:
        super().__init__()
        self.with_cls_token = with_cls_token

    def forward(self, hidden_states, height, width):
        return hidden_states


@pytest.mark.parametrize(("tokens", "cls_token", "grid"), [(8, False, (2, 4)), (9, True, (2, 4)), (9, False, (3, 3)),
                                                           (7, False, (1, 7))])
def test_a_convolutional_attention_gets_the_squarest_grid_of_its_tokens(tokens, cls_token, grid):
    made = hf_inputs.made(_Grid(cls_token), torch.zeros(1, tokens, 4), {})
    assert (made["height"], made["width"]) == grid


def test_a_segformer_attention_is_called_on_the_grid_of_its_tokens():
    """SegFormer reduces its keys and values on a (height, width) grid: attnlab's call is the
    module's on 8 tokens as 2 rows of 4, given here."""
    from transformers import SegformerConfig
    from transformers.models.segformer.modeling_segformer import SegformerAttention

    config = SegformerConfig()
    config._attn_implementation = "eager"
    torch.manual_seed(0)
    module = SegformerAttention(config, hidden_size=64, num_attention_heads=4, sequence_reduction_ratio=2).eval()
    x = torch.rand(2, 8, 64, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        expected = module(x, height=2, width=4)[0]
        got = HuggingFaceCall().call(module, x).output
    torch.testing.assert_close(got, expected)


def test_an_input_from_outside_the_attention_is_refused_in_one_line_naming_it():
    with pytest.raises(UserError) as caught:
        attnlab.run("hf:t5gemma2_decoder", overrides=SIZES)  # its merged attention's keys: its encoder's states too
    message = str(caught.value)
    assert "\n" not in message
    assert "T5Gemma2MergedAttention.forward needs 'merged_attention_mask'" in message
    assert "encoder_hidden_states" in message and "passes merged_attention_mask=" in message


def test_a_mask_handed_to_torchs_key_padding_mask_is_read_as_padding_only():
    """WavLM's and BridgeTower's attention_mask becomes torch's key_padding_mask: it drops padded
    keys, never the future, so the class attends both ways and no padding is no mask."""
    from transformers.models.bridgetower.modeling_bridgetower import BridgeTowerResidualAttention
    from transformers.models.llama.modeling_llama import LlamaAttention
    from transformers.models.wavlm.modeling_wavlm import WavLMAttention

    assert hf_inputs.padding_mask_only(WavLMAttention) and hf_inputs.padding_mask_only(BridgeTowerResidualAttention)
    assert not hf_inputs.padding_mask_only(LlamaAttention)
