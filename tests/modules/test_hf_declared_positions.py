"""Positions and norms a library's attention class declares by its own numbers, never an error:
2-D and 3-D RoPE over patches with a class token left unrotated (DINOv3, MLCD, V-JEPA 2; after a
QK-norm, Sapiens 2), a
LayerNorm over the whole projection before RoPE (ESM C), QK-norm then a factor on the queries or
keys (Muse Spark's qk_scale_factor, Dory's nGPT sqk), and a tower's own head count under its own
name (Moonshine's decoder_num_attention_heads, PP-FormulaNet's decoder_attention_heads, Idefics2's
resampler_n_heads and resampler_head_dim, MiMo-V2-Flash's v_head_dim). For each,
the library's class gives no error finding and a mistake planted in a subclass (a projection of
the previous token's row) is still found; plain torch shows each planted copy computes otherwise."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import attnlab

pytest.importorskip("transformers")

from transformers.models.dinov3_vit.modeling_dinov3_vit import DINOv3ViTAttention  # noqa: E402
from transformers.models.esmc.modeling_esmc import EsmcAttention  # noqa: E402
from transformers.models.mlcd.modeling_mlcd import MLCDAttention  # noqa: E402
from transformers.models.muse_spark.modeling_muse_spark import MuseSparkTextAttention  # noqa: E402
from transformers.models.pp_formulanet.modeling_pp_formulanet import PPFormulaNetAttention  # noqa: E402
from transformers.models.sapiens2.modeling_sapiens2 import Sapiens2Attention  # noqa: E402
from transformers.models.vjepa2.modeling_vjepa2 import VJEPA2RopeAttention  # noqa: E402

from tests.modules.hf_runs import SIZES, assert_runs_clean, errors  # noqa: E402


class _Previous(nn.Linear):
    """The projection of the previous token's row: each token's query (or key) is its neighbour's."""

    def forward(self, x):
        return super().forward(torch.roll(x, 1, dims=-2))


def _planted(cls: type, projection: str) -> type:
    def __init__(self, *args, **kwargs):
        cls.__init__(self, *args, **kwargs)
        getattr(self, projection).__class__ = _Previous

    return type(f"{cls.__name__}Previous{projection.title().replace('_', '')}", (cls,),
                {"__init__": __init__, "__doc__": f"Planted: {projection} of the previous token's row."})


DinoPreviousQueries = _planted(DINOv3ViTAttention, "q_proj")
MlcdPreviousKeys = _planted(MLCDAttention, "k_proj")
VjepaPreviousQueries = _planted(VJEPA2RopeAttention, "query")
EsmcPreviousQueries = _planted(EsmcAttention, "q_proj")
MusePreviousKeys = _planted(MuseSparkTextAttention, "k_proj")
FormulaNetPreviousQueries = _planted(PPFormulaNetAttention, "q_proj")
SapiensPreviousKeys = _planted(Sapiens2Attention, "k_proj")


def _rope(rows: int, head_dim: int) -> tuple[torch.Tensor, torch.Tensor]:
    angles = torch.rand(rows, head_dim // 2, generator=torch.Generator().manual_seed(1)) * 3
    angles = torch.cat([angles, angles], dim=-1)  # (rows, hs)
    return angles.cos(), angles.sin()


def test_the_planted_mistakes_are_real():
    """Independently of attnlab: each planted copy, given the library class's weights, computes
    other outputs than the library class on the same inputs."""
    from transformers import (
        DINOv3ViTConfig,
        EsmcConfig,
        MLCDVisionConfig,
        MuseSparkTextConfig,
        PPFormulaNetTextConfig,
        Sapiens2Config,
        VJEPA2Config,
    )

    x = torch.rand(1, 8, 64, generator=torch.Generator().manual_seed(0))  # (b, num_tokens, d_in)
    cos, sin = _rope(8, 16)
    heads = {"hidden_size": 64, "num_attention_heads": 4}
    cases = [
        (DINOv3ViTAttention, DinoPreviousQueries, (DINOv3ViTConfig(**heads),),
         {"position_embeddings": (cos[1:], sin[1:])}),  # a class token, 7 patches
        (MLCDAttention, MlcdPreviousKeys, (MLCDVisionConfig(**heads),), {"position_embeddings": (cos, sin)}),
        (VJEPA2RopeAttention, VjepaPreviousQueries, (VJEPA2Config(**heads), 64, 4), {}),
        (EsmcAttention, EsmcPreviousQueries, (EsmcConfig(**heads, num_key_value_heads=4),),
         {"position_embeddings": (cos[None], sin[None]), "attention_mask": None}),
        (MuseSparkTextAttention, MusePreviousKeys, (MuseSparkTextConfig(**heads, num_key_value_heads=4, head_dim=16), 0),
         {"position_embeddings": (cos[None], sin[None])}),
        (PPFormulaNetAttention, FormulaNetPreviousQueries, (64, 4, 0.0, False, True, False, PPFormulaNetTextConfig()),
         {}),
        (Sapiens2Attention, SapiensPreviousKeys, (Sapiens2Config(**heads), 0),
         {"position_embeddings": (cos[1:], sin[1:])}),  # QK-norm, then RoPE on 7 patches after a class token
    ]
    for library, planted, args, kwargs in cases:
        torch.manual_seed(0)
        original = library(*args).eval()
        copy = planted(*args).eval()
        copy.load_state_dict(original.state_dict())
        with torch.no_grad():
            assert (copy(x, **kwargs)[0] - original(x, **kwargs)[0]).abs().max() > 1e-3, library.__name__


class _TowersConfig:
    """A config holding its heads under a tower's names beside the plain ones, and counts and sizes
    that are no attention's."""

    def __init__(self, hidden_size=32, num_attention_heads=2, decoder_attention_heads=2,
                 encoder_num_key_value_heads=2, self_attn_heads=1, resampler_n_heads=16, resampler_head_dim=96,
                 v_head_dim=128, num_prediction_heads=3):
        self.hidden_size, self.num_attention_heads = hidden_size, num_attention_heads
        self.decoder_attention_heads, self.encoder_num_key_value_heads = decoder_attention_heads, encoder_num_key_value_heads
        self.self_attn_heads, self.resampler_n_heads, self.resampler_head_dim = self_attn_heads, resampler_n_heads, resampler_head_dim
        self.v_head_dim, self.num_prediction_heads = v_head_dim, num_prediction_heads


class _LatentConfig:
    """MLA's family of head sizes (DeepSeek's): the class's own design, kept."""

    def __init__(self, hidden_size=32, num_attention_heads=2, qk_nope_head_dim=128, qk_rope_head_dim=64,
                 v_head_dim=128):
        self.hidden_size, self.num_attention_heads = hidden_size, num_attention_heads
        self.qk_nope_head_dim, self.qk_rope_head_dim, self.v_head_dim = qk_nope_head_dim, qk_rope_head_dim, v_head_dim


class _Resampler(nn.Module):
    """Reads its heads under the resampler's names, as Idefics2's perceiver attention does."""

    def __init__(self, config):
        super().__init__()
        self.num_heads, self.head_dim = config.resampler_n_heads, config.resampler_head_dim


def test_a_towers_own_head_count_is_filled_with_num_heads():
    from attnlab.modules.configs import ConfigConstructor

    built = ConfigConstructor(_Resampler, _TowersConfig, "towers")
    config = built.config({"d_in": 64, "d_out": 64, "num_heads": 4, "num_kv_heads": 2}, {})
    assert (config.hidden_size, config.num_attention_heads, config.decoder_attention_heads) == (64, 4, 4)
    assert (config.self_attn_heads, config.encoder_num_key_value_heads) == (4, 2)
    assert (config.resampler_n_heads, config.resampler_head_dim, config.v_head_dim) == (4, 16, 16)
    assert config.num_prediction_heads == 3  # no attention's: left as it is
    latent = ConfigConstructor(nn.Identity, _LatentConfig, "latent").config({"d_in": 64, "d_out": 64, "num_heads": 4}, {})
    assert (latent.qk_nope_head_dim, latent.qk_rope_head_dim, latent.v_head_dim) == (128, 64, 128)


@pytest.mark.slow
@pytest.mark.parametrize(("model", "declared"), [
    ("dinov3_vit", ("rotary", "queries")),  # 2-D RoPE on the patches, the class token unrotated
    ("sapiens2", ("rotary", "queries")),  # the same after a QK-norm, its register tokens unrotated too
    ("mlcd", ("rotary", "queries")),
    ("vjepa2", ("rotary", "queries")),  # 3-D, cos and sin of two frequencies on one pair
    ("esmc", ("qk_norm", "queries")),  # a LayerNorm over the whole projection, then RoPE
    ("muse_spark_text", ("rotary", "queries")),  # QK-norm, then the queries times qk_scale_factor
    ("dory", ("rotary", "queries")),  # nGPT's unit-length queries and keys, the queries times sqk^2
    ("moonshine", None),  # decoder_num_attention_heads
    ("pp_formulanet_text", None),  # decoder_attention_heads
    ("patchtsmixer", None),  # self_attn_heads
    ("idefics2_perceiver", None),  # resampler_n_heads, resampler_head_dim, read by the class
    ("mimo_v2_flash", ("rotary", "queries")),  # the values' own v_head_dim
])
def test_the_library_class_gives_no_error_finding(model, declared):
    assert_runs_clean(model, declared)


@pytest.mark.slow
@pytest.mark.parametrize("planted", [DinoPreviousQueries, MlcdPreviousKeys, VjepaPreviousQueries,
                                     EsmcPreviousQueries, MusePreviousKeys, FormulaNetPreviousQueries,
                                     SapiensPreviousKeys])
def test_a_mistake_planted_in_a_subclass_is_still_found(planted):
    """A projection of the previous token: the queries (or, the keys wrong, the rotation they no
    longer share) do not match the reference's projection of the same token."""
    result = attnlab.run(planted, overrides=SIZES)
    assert {stage for _, stage in errors(result)} & {"queries", "keys"}, [f.message for f in result.findings]
