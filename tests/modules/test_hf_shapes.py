"""Library classes whose parameters, config or inputs are shaped unlike the book's: Moshi's and
Kyutai's projections wrapped (`q_proj.linear`) and stacked one per position, Kolibri's indexer heads
tied to the query heads of a key head, SAM 2's per-stage widths, EoMT-DINOv3's rotary read off an
image's size, LayoutLMv2's model needing a package that is not installed, LED's token count, Zamba's
input width of its own. Each library class runs with no error finding, and a mistake planted in a
subclass is still found at its stage."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import attnlab
from tests.modules.hf_runs import SIZES, assert_runs_clean, errors

pytest.importorskip("transformers")

from transformers.models.emu3.modeling_emu3 import Emu3VQVAEAttentionBlock  # noqa: E402
from transformers.models.eomt_dinov3.modeling_eomt_dinov3 import EomtDinov3Attention  # noqa: E402
from transformers.models.kyutai_speech_to_text.modeling_kyutai_speech_to_text import (  # noqa: E402
    KyutaiSpeechToTextAttention,
)
from transformers.models.maskformer.modeling_maskformer import MaskFormerDetrSelfAttention  # noqa: E402
from transformers.models.moshi.modeling_moshi import MoshiAttention  # noqa: E402
from transformers.models.zamba.modeling_zamba import ZambaAttention  # noqa: E402


def _doubled(module: nn.Module) -> None:
    """The module, of whatever class, returning twice what its class returns."""
    own = type(module)

    def forward(self, *args, **kwargs):
        return 2 * own.forward(self, *args, **kwargs)

    module.__class__ = type(f"Doubled{own.__name__}", (own,), {"forward": forward})


def _planted(cls: type[nn.Module], projection: str) -> type[nn.Module]:
    """A copy of `cls` whose `projection` doubles what it returns."""

    def __init__(self, *args, **kwargs):
        cls.__init__(self, *args, **kwargs)
        _doubled(self.get_submodule(projection))

    return type(f"{cls.__name__}Doubled", (cls,), {"__init__": __init__})


def test_a_wrapped_projection_is_named_by_its_wrapper():
    from attnlab.modules.roles import parameter_role

    assert parameter_role("q_proj.linear.weight") == "queries"
    assert parameter_role("v_proj.linear.weight") == "values"
    assert parameter_role("o_proj.linear.weight") == "out"
    assert parameter_role("mlp.linear.weight") is None  # a wrapper's name says nothing of itself


def test_per_position_weights_take_the_reference_s_weight_in_each_position():
    """Independently of attnlab's diagnosis: with the reference's weight in each of Moshi's per-position
    (codebook) weights, its query projection is plain x @ W.T at every position."""
    from transformers import MoshiConfig

    from attnlab.modules.layouts import Projections, load_projections

    config = MoshiConfig(hidden_size=64, num_attention_heads=4, num_key_value_heads=4, num_codebooks=8)
    module = MoshiAttention(config, layer_idx=0, use_flexible_linear=True)
    generator = torch.Generator().manual_seed(0)
    weights = [torch.randn(64, 64, generator=generator) for _ in range(4)]
    report = load_projections(module, Projections(*weights), num_heads=4)
    assert report["q_proj.linear.weight"].startswith("shared")
    x = torch.randn(1, 8, 64, generator=generator)  # (b, num_tokens, d_in): one token per codebook
    with torch.no_grad():
        assert torch.allclose(module.q_proj(x), x @ weights[0], atol=1e-5)


def test_kolibri_s_indexer_heads_shrink_with_the_query_heads_of_a_key_head():
    """Its validator allows index_num_heads up to num_heads // num_kv_heads: 48 // 4 = 12 by default,
    4 // 4 = 1 at the survey's heads, which the config is built with."""
    from attnlab.modules.hf import hf_constructor

    module = hf_constructor("hf:kolibri1_1")(d_in=64, d_out=64, num_heads=4)
    config = module.config
    assert config.num_attention_heads == 4
    assert config.index_num_heads == config.num_attention_heads // config.num_key_value_heads == 1


def test_a_config_s_per_stage_widths_are_the_run_s():
    """SAM 2's Hiera builds stage i at embed_dim_per_stage[i] (96, 192, ... by default, filled by its
    config's __post_init__): every stage at the run's width and heads."""
    from attnlab.modules.hf import hf_constructor

    module = hf_constructor("hf:sam2_hiera_det_model")(64, 64, 4, context_length=8)
    assert module.config.embed_dim_per_stage == [64, 64, 64, 64]
    assert module.config.num_attention_heads_per_stage == [4, 4, 4, 4]
    assert tuple(module.qkv.weight.shape) == (3 * 64, 64)


def test_a_model_needing_a_missing_package_is_refused_in_one_line_naming_it():
    from transformers.utils import is_detectron2_available

    if is_detectron2_available():
        pytest.skip("detectron2 is installed here")
    result = attnlab.run("hf:layoutlmv2", overrides=SIZES)
    assert result.record.status != "ok"
    assert "LayoutLMv2Model needs detectron2, which is not installed" in result.record.error
    assert "\n" not in result.record.error


@pytest.mark.slow
@pytest.mark.parametrize(("model", "declared"), [
    ("moshi", None),  # q_proj.linear.weight (8, 64, 64): one weight per position
    ("kyutai_speech_to_text", ("rotary", "queries")),  # q_proj.linear: an nn.Linear in a wrapper
    ("kolibri1_1", ("qk_norm", "queries")),
    ("eomt_dinov3", ("rotary", "queries")),  # RoPE over the patches after the class and register tokens
    ("sam2_hiera_det_model", None),  # every stage's width (embed_dim_per_stage) and heads the run's
    ("maskformer", ("added_positions", "queries")),  # 8 heads of its own: the reference takes them
    ("emu3_vqgan", None),  # Emu3VQVAEAttentionBlock: token attention named ...Block
])
def test_the_library_class_gives_no_error_finding(model, declared):
    assert_runs_clean(model, declared)


@pytest.mark.slow
@pytest.mark.parametrize(("planted", "expected"), [
    (_planted(MoshiAttention, "o_proj.linear"), ("output_path", "output")),
    (_planted(KyutaiSpeechToTextAttention, "q_proj.linear"), ("query_source", "queries")),
    (_planted(EomtDinov3Attention, "q_proj"), ("query_source", "queries")),
    (_planted(MaskFormerDetrSelfAttention, "k_proj"), ("scaling", "scaled_scores")),  # 2 q.k: a scale of 2
    (_planted(Emu3VQVAEAttentionBlock, "v_proj"), ("value_path", "values")),
])
def test_a_mistake_planted_in_a_subclass_is_still_found(planted, expected):
    result = attnlab.run(planted, overrides=SIZES)
    assert expected in errors(result), [f.message for f in result.findings]


def test_heads_num_heads_cannot_reach_are_the_module_s_own():
    """MaskFormer's DETR decoder reads decoder_attention_heads of a sub-config its attention's config
    (MaskFormerConfig) has no spelling for: num_heads=4 builds the default 8 heads of 64 // 8 columns,
    which the reference then takes; a class num_heads reaches (BERT's) keeps none of its own."""
    from attnlab.modules.built import plan

    values = {"d_in": 64, "d_out": 64, "num_heads": 4, "n_tokens": 8}
    built = plan("hf:maskformer", values).build(0)
    assert built.module.head_dim == 64 // 8 and built.own_num_heads(64) == 8
    assert plan("hf:bert", values).build(0).own_num_heads(64) is None


def test_the_next_size_follows_a_model_that_adds_tokens_of_its_own():
    """CPM-Ant's model sees its 32 prompt tokens before the ids: 33 ids show 65 tokens, 17 show 49,
    so 1 id shows the 33 wanted (a ratio alone would try 17, 9, 5, ...)."""
    from attnlab.modules.hf_record import _next_size

    assert _next_size({33: 65}, 33, 33) == 17
    assert _next_size({33: 65, 17: 49}, 17, 33) == 1
    assert _next_size({8: 16}, 8, 8) == 4  # tokens in proportion: the ratio


@pytest.mark.slow
def test_a_class_its_model_runs_at_a_count_of_its_own_runs_there_and_says_why():
    """LED's encoder attention takes a multiple of its window (512 by default): random inputs run there."""
    result = attnlab.run("hf:led", overrides=SIZES)
    assert errors(result) == [], [f.message for f in result.findings]
    assert result.record.n_tokens == 512
    [note] = result.record.notes
    assert note.startswith("ran at n_tokens=512, not inputs.n_tokens=8") and "its attention sees 512 tokens" in note


@pytest.mark.slow
def test_projections_of_another_input_width_are_refused_in_one_line_naming_them():
    """MobileBERT's attention takes its bottleneck (true_hidden_size 128) for queries and keys and the
    hidden states (64) for values: one line naming each width, not a matrix product's shapes."""
    result = attnlab.run("hf:mobilebert", overrides=SIZES)
    assert result.record.status != "ok"
    assert "takes inputs of other widths than the run's d_in=64 (query 128, key 128, value 64 wide)" in \
        result.record.error
    assert "\n" not in result.record.error


@pytest.mark.slow
def test_a_class_of_an_input_width_of_its_own_runs_the_whole_comparison_at_it():
    """Zamba's attention takes its hidden states and the embeddings side by side (2 x hidden_size wide,
    read here off the library's class in plain torch): the inputs and the reference run at that width,
    the class is built at the run's d_in=64 (its output projection back to 64), and the record says why."""
    from transformers import ZambaConfig

    own = ZambaAttention(ZambaConfig(hidden_size=64, num_attention_heads=4), layer_idx=0)
    width, heads_width = own.q_proj.in_features, own.q_proj.out_features  # (128, 128)
    result = attnlab.run("hf:zamba", overrides=SIZES)
    assert errors(result) == [], [f.message for f in result.findings]
    record = result.record
    assert (record.d_in, record.d_out) == (width, heads_width) == (128, 128)
    assert record.variant.shapes["inputs"][-1] == record.reference.shapes["inputs"][-1] == width
    assert record.variant.shapes["queries"] == record.reference.shapes["queries"] == [2, 4, 8, heads_width // 4]
    assert record.variant.shapes["output"][-1] == own.o_proj.out_features == 64
    [note] = record.notes
    assert note.startswith("ran at d_in=128, not inputs.d_in=64") and "(q_proj 128, k_proj 128, v_proj 128 wide)" in note


@pytest.mark.slow
def test_a_mistake_planted_in_a_class_of_its_own_width_is_found_at_that_width():
    """Queries doubled in a copy of Zamba's class: its scores twice the library's, which the diagnosis
    (run 128 wide) reads as scores scaled by twice the class's own scale."""
    planted = _planted(ZambaAttention, "q_proj")
    from transformers import ZambaConfig

    config = ZambaConfig(hidden_size=64, num_attention_heads=4)
    mine, library = planted(config, layer_idx=0), ZambaAttention(config, layer_idx=0)
    mine.load_state_dict(library.state_dict())
    x = torch.randn(2, 8, 128)  # (b, num_tokens, attention_hidden_size)
    torch.testing.assert_close(mine.q_proj(x), 2 * (x @ library.q_proj.weight.T))  # plain torch: the queries doubled
    result = attnlab.run(planted, overrides=SIZES)
    assert ("scaling", "scaled_scores") in errors(result), [f.message for f in result.findings]
    assert result.record.d_in == 128
