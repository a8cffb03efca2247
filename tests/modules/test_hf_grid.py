"""A Hugging Face attention whose forward reads its hidden states as an image's grid (b, H, W, d)
(SAM's and ViTDet's windowed vision attention) or with a point-batch axis (SAM's mask decoder):
the layout read from the forward's source, attnlab's (b, T, d) laid out in it, the output read
back. Expected numbers come from SDPA on the class's own weights. A grid class whose model makes
an input for its window's positions (SAM 3's 2-D rotary) runs on its model's recorded call, at the
window's own tokens."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

import attnlab
from tests.modules.hf_runs import SIZES

pytest.importorskip("transformers")

from transformers import SamVisionConfig  # noqa: E402
from transformers.models.llama.modeling_llama import LlamaAttention  # noqa: E402
from transformers.models.sam.modeling_sam import SamAttention, SamVisionAttention  # noqa: E402
from transformers.models.sam3.modeling_sam3 import Sam3ViTRoPEAttention  # noqa: E402

from attnlab.modules import hf_grid  # noqa: E402
from attnlab.modules.built import HuggingFaceCall  # noqa: E402
from attnlab.modules.hf_record import Call  # noqa: E402

PLUGINS = Path(__file__).parent / "hf_grid_plugins"


def test_the_layout_is_read_from_the_forwards_own_unpacking_of_its_input():
    assert hf_grid.axes(SamVisionAttention) == ("batch", "height", "width", "d")
    assert hf_grid.axes(SamAttention) == ("batch", "batch", "tokens", "d")  # in _separate_heads, which forward calls
    assert hf_grid.axes(LlamaAttention) is None


def test_sams_vision_attention_on_the_tokens_grid_is_unmasked_attention_over_all_of_them():
    """T = 8 tokens as a 2 x 4 grid: every token attends to every other, as SDPA computes it from the
    class's qkv and proj weights (relative positions off), and the output comes back as (b, T, d)."""
    config = SamVisionConfig(hidden_size=64, num_attention_heads=4, use_rel_pos=False)
    config._attn_implementation = "eager"
    torch.manual_seed(0)
    module = SamVisionAttention(config, window_size=0).eval()
    module.config = config  # held as attnlab holds it for a class that keeps none
    x = torch.rand(2, 8, 64, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        got = HuggingFaceCall().call(module, x).output
        q, k, v = module.qkv(x).reshape(2, 8, 3, 4, 16).permute(2, 0, 3, 1, 4)  # (b, heads, T, hs) each
        context_vec = F.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(2, 8, 64)  # (b, T, d_out)
        expected = module.proj(context_vec)
    assert got.shape == (2, 8, 64)
    torch.testing.assert_close(got, expected)


def test_a_recorded_call_on_a_grid_lays_the_tokens_out_as_its_model_did_and_reads_the_output_back():
    hidden = torch.zeros(2, 3, 4, 5)  # (b, H, W, d): the model's
    call = Call((hidden, "cos-sin"), {"mask": hidden}, hidden, grid=True)
    x = torch.arange(2 * 12 * 5, dtype=torch.float32).reshape(2, 12, 5)  # (b, T, d)
    args, kwargs = call.on(x)
    assert torch.equal(args[0], x.reshape(2, 3, 4, 5)) and args[1] == "cos-sin" and kwargs["mask"] is args[0]
    out = torch.rand(2, 3, 4, 7)  # (b, H, W, d_out)
    back = call.back((out, None), x)
    assert torch.equal(back[0], out.reshape(2, 12, 7)) and back[1] is None


class _Previous(torch.nn.Linear):
    """The projection of the previous grid cell's row."""

    def forward(self, x):
        return super().forward(torch.roll(x, 1, dims=-2))


class Sam3PreviousKeys(Sam3ViTRoPEAttention):
    """Planted: each key projected from its grid neighbour's row."""

    def __init__(self, config):
        super().__init__(config)
        self.k_proj.__class__ = _Previous


def test_the_planted_sam3_mistake_is_real():
    from transformers import Sam3ViTConfig
    from transformers.models.sam3.modeling_sam3 import Sam3ViTLayer

    config = Sam3ViTConfig(hidden_size=64, num_attention_heads=4, window_size=2)
    config._attn_implementation = "eager"
    torch.manual_seed(0)
    original = Sam3ViTRoPEAttention(config).eval()
    copy = Sam3PreviousKeys(config).eval()
    copy.load_state_dict(original.state_dict())
    layer = Sam3ViTLayer(config, window_size=2)
    x = torch.rand(1, 2, 2, 64, generator=torch.Generator().manual_seed(0))  # (b, H, W, d): one 2 x 2 window
    rope = layer.rotary_emb(x, layer.position_ids)  # (cos, sin) of the window's positions, as its layer makes them
    with torch.no_grad():
        assert (copy(x, rope)[0] - original(x, rope)[0]).abs().max() > 1e-3


@pytest.mark.slow
def test_sam3s_rope_attention_runs_at_its_windows_tokens_and_a_planted_mistake_is_found():
    """Its layer's rotary covers its window's positions: the run takes the window's tokens (24 x 24)
    and names the 2-D RoPE; keys of the grid neighbour are still an error."""
    result = attnlab.run("hf:sam3_vit_model", overrides=SIZES)
    assert result.record.status == "ok", result.record.error
    assert result.stages["inputs"].shape[-2] == 576
    assert not [f for f in result.findings if f.severity == "error"], [f.message for f in result.findings]
    assert ("rotary", "queries") in {(f.code, f.stage) for f in result.findings}
    planted = attnlab.run(Sam3PreviousKeys, overrides=SIZES)
    assert planted.record.status == "ok", planted.record.error
    assert [f for f in planted.findings if f.severity == "error" and f.stage in ("queries", "keys")], \
        [f.message for f in planted.findings]


@pytest.mark.slow
@pytest.mark.parametrize("model", ["sam_vision_model", "vitdet", "got_ocr2_vision", "seggpt", "sam_mask_decoder"])
def test_a_grid_layout_class_runs_without_an_error_finding(model):
    result = attnlab.run(f"hf:{model}", overrides=SIZES)
    assert result.record.status == "ok", result.record.error
    assert not [f for f in result.findings if f.severity == "error"], [f.message for f in result.findings]


@pytest.mark.slow  # the plugin folder discovered and its transformers class found: tens of seconds
@pytest.mark.parametrize(("variant", "errors"), [("sam_vision_correct", []),
                                                 ("sam_vision_softmax_query_axis", [("softmax_axis", "weights")])])
def test_a_mistake_planted_in_a_copy_of_sams_vision_attention_is_found_at_its_stage(use_plugins, variant, errors):
    use_plugins(PLUGINS)
    result = attnlab.run(variant, overrides=[*SIZES, "variant.params.use_rel_pos=false"])
    assert result.record.status == "ok", result.record.error
    assert [(f.code, f.stage) for f in result.findings if f.severity == "error"] == errors


def test_a_class_handing_its_input_to_a_sequence_first_torch_attention_is_called_sequence_first():
    """BridgeTower's residual attention takes (T, b, d), as its model permutes it: each batch item's
    output is the module's on that item alone (called (T, 1, d) here)."""
    from transformers import BridgeTowerVisionConfig
    from transformers.models.bridgetower.modeling_bridgetower import BridgeTowerResidualAttention

    config = BridgeTowerVisionConfig(hidden_size=64)
    torch.manual_seed(0)
    module = BridgeTowerResidualAttention(config).eval()
    module.config = config
    sam = SamVisionAttention(SamVisionConfig(hidden_size=64, num_attention_heads=4), 0)
    assert hf_grid.sequence_first(module) and not hf_grid.sequence_first(sam)
    x = torch.rand(2, 8, 64, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        got = HuggingFaceCall().call(module, x).output
        alone = [module(x[i][:, None])[:, 0] for i in range(2)]  # (T, d) each
    torch.testing.assert_close(got, torch.stack(alone))
