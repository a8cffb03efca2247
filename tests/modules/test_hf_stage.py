"""A hierarchical vision model's attention (Swin's windows, PVT's and SegFormer's reduced keys)
built for the stage and window the run's tokens fit, from its config alone. Expected numbers come
from SDPA on the class's own weights and from the config's per-stage lists read here."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import attnlab
from attnlab.errors import UserError

pytest.importorskip("transformers")

from transformers import PvtV2Config  # noqa: E402

from attnlab.modules import hf_stage  # noqa: E402
from attnlab.modules.built import HuggingFaceCall  # noqa: E402
from attnlab.modules.hf import hf_constructor  # noqa: E402

PLUGINS = Path(__file__).parent / "hf_stage_plugins"
SIZES = ["inputs=random", "inputs.d_in=64", "d_out=64", "num_heads=4"]


@pytest.mark.parametrize(("tokens", "stage"), [(8, 2), (16, 1), (64, 0), (7, 3)])
def test_the_stage_is_the_first_whose_reduction_divides_both_sides_of_the_tokens_grid(tokens, stage):
    """PVT v2's sr_ratios (8, 4, 2, 1): 8 tokens are 2 x 4 (ratio 2), 16 are 4 x 4 (4), 64 are 8 x 8
    (8); 7 tokens (1 x 7) only the last stage's ratio 1 divides."""
    assert hf_stage.stage_of(PvtV2Config(), tokens) == stage


@pytest.mark.slow  # the first hf: class built imports transformers' registry
def test_pvts_attention_is_built_for_that_stage_every_stage_d_in_wide():
    module = hf_constructor("hf:pvt_v2")(64, 64, 4, context_length=8)
    assert module.spatial_reduction_ratio == 2 and module.spatial_reduction.kernel_size == (2, 2)
    assert module.query.in_features == 64 and module.num_attention_heads == 4


@pytest.mark.slow
def test_swins_window_is_the_tokens_and_attends_both_ways_with_its_relative_position_bias():
    """9 tokens: one 3 x 3 window. The output is SDPA over all 9 with the class's own relative
    position bias added and no causal mask, from its q/k/v/o projections."""
    module = hf_constructor("hf:swin")(64, 64, 4, context_length=9).eval()
    with torch.no_grad():
        torch.nn.init.normal_(module.relative_position_bias.relative_position_bias_table)  # a bias that shows
        x = torch.rand(2, 9, 64, generator=torch.Generator().manual_seed(0))
        got = HuggingFaceCall().call(module, x).output
        q, k, v = (proj(x).view(2, 9, 4, 16).transpose(1, 2) for proj in (module.q_proj, module.k_proj, module.v_proj))
        bias = module.relative_position_bias()  # (1, heads, 9, 9)
        context_vec = F.scaled_dot_product_attention(q, k, v, attn_mask=bias).transpose(1, 2).reshape(2, 9, 64)
        expected = module.o_proj(context_vec)  # (b, T, d_out)
    torch.testing.assert_close(got, expected)


def test_a_class_taking_only_a_square_window_runs_random_inputs_at_one_and_says_why():
    result = attnlab.run("hf:swin", overrides=[*SIZES, "inputs.n_tokens=8"])
    assert result.record.status == "ok", result.record.error
    assert result.record.n_tokens == 9 and result.record.variant.shapes["inputs"][-2] == 9
    [note] = result.record.notes
    assert note.startswith("ran at n_tokens=9, not inputs.n_tokens=8") and "no square number" in note


def test_a_class_taking_only_a_square_window_refuses_the_user_s_own_tokens_in_one_line(tmp_path):
    """Tokens read from a file are never cut or padded to the class's count: the refusal stands."""
    path = tmp_path / "tokens.npy"
    np.save(path, np.random.default_rng(0).standard_normal((8, 64)).astype(np.float32))
    with pytest.raises(UserError, match=r"takes a square window .* n_tokens=8 is no square number .*n_tokens=9"):
        attnlab.run("hf:swin", overrides=["inputs=file", f"inputs.path={path}", "d_out=64", "num_heads=4"])


@pytest.mark.slow
@pytest.mark.parametrize(("model", "tokens"), [("swin", 9), ("swinv2", 8), ("donut-swin", 8), ("maskformer-swin", 8),
                                               ("clap_audio_model", 8), ("pvt", 8), ("pvt_v2", 8), ("segformer", 8),
                                               ("glpn", 8)])
def test_a_windowed_or_reduced_class_runs_without_an_error_finding(model, tokens):
    result = attnlab.run(f"hf:{model}", overrides=[*SIZES, f"inputs.n_tokens={tokens}"])
    assert result.record.status == "ok", result.record.error
    assert not [f for f in result.findings if f.severity == "error"], [f.message for f in result.findings]


@pytest.mark.slow  # the plugin folder discovered and its transformers class found: tens of seconds
@pytest.mark.parametrize(("variant", "errors"), [("pvt_v2_correct", []),
                                                 ("pvt_v2_unscaled", [("scaling", "scaled_scores")]),
                                                 ("pvt_v2_softmax_query_axis", [("softmax_axis", "weights")])])
def test_a_mistake_planted_in_a_copy_of_pvts_reduced_attention_is_found_at_its_stage(use_plugins, variant, errors):
    """The reduced keys are named not observable (info), and a mistake is still found at its stage."""
    use_plugins(PLUGINS)
    result = attnlab.run(variant, overrides=[*SIZES, "inputs.n_tokens=8"])
    assert result.record.status == "ok", result.record.error
    assert [(f.code, f.stage) for f in result.findings if f.severity == "error"] == errors
    assert ("not_observable", "keys") in [(f.code, f.stage) for f in result.findings if f.severity == "info"]


@pytest.mark.slow
def test_a_class_built_by_callers_without_a_config_gets_its_stages_sizes_not_the_config():
    """CvT builds CvtSelfAttention(num_heads, embed_dim, ...) from CvtAttention and CvtLayer, which take
    no config, under CvtStage(config, stage): the sizes are the stage's, read from the filled config."""
    module = hf_constructor("hf:cvt")(64, 64, 4)
    assert module.num_heads == 4 and module.embed_dim == 64
    assert module.convolution_projection_query.convolution_projection.convolution.in_channels == 64
