"""A scale the library's own class declares (by its lineage or its constructor) and a layout it
declares (CodeGen's mp_num groups, XGLM's and SeamlessM4T's heads, Falcon's fused groups) are read,
never reported as mistakes, and a mistake planted in a copy of such a class is still found at its stage."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import attnlab

pytest.importorskip("transformers")

from transformers.models.albert.modeling_albert import AlbertAttention  # noqa: E402
from transformers.models.gemma4.modeling_gemma4 import Gemma4TextAttention  # noqa: E402
from transformers.models.llama.modeling_llama import LlamaAttention  # noqa: E402
from transformers.models.mistral4.modeling_mistral4 import Mistral4Attention  # noqa: E402
from transformers.models.switch_transformers.modeling_switch_transformers import (  # noqa: E402
    SwitchTransformersAttention,
)
from transformers.models.udop.modeling_udop import UdopAttention  # noqa: E402

from attnlab.modules.hf_lineage import origin_type  # noqa: E402
from tests.modules.hf_runs import SIZES, errors  # noqa: E402


@pytest.mark.parametrize(("cls", "origin"), [(UdopAttention, "t5"), (SwitchTransformersAttention, "t5"),
                                             (Mistral4Attention, "deepseek_v3"), (LlamaAttention, None)])
def test_a_class_copied_from_or_derived_from_a_family_names_it(cls, origin):
    assert origin_type(cls) == origin


@pytest.mark.slow
@pytest.mark.parametrize("model", ["switch_transformers", "udop", "gemma4_text", "mistral4"])
def test_the_scale_the_library_declares_is_info_not_a_scaling_error(model):
    result = attnlab.run(f"hf:{model}", overrides=SIZES)
    assert errors(result) == [], [f.message for f in result.findings]
    assert "declared_scale" in {f.code for f in result.findings}


class Gemma4WrongScale(Gemma4TextAttention):
    """Planted: the scores scaled by 0.5 where the library's class sets 1.0."""

    def __init__(self, config, layer_idx):
        super().__init__(config, layer_idx)
        self.scaling = 0.5


class _Doubled(nn.Linear):
    def forward(self, x):
        return 2 * super().forward(x)


class SwitchDoubledQueries(SwitchTransformersAttention):
    """Planted: the queries doubled (the T5 copy's unscaled scores twice as large)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.q.__class__ = _Doubled


def test_the_planted_mistakes_are_real():
    """Independently of attnlab: the planted copies' scores differ from the library's on the same input."""
    from transformers import SwitchTransformersConfig

    config = SwitchTransformersConfig(d_model=64, num_heads=4, d_kv=16)
    torch.manual_seed(0)
    original = SwitchTransformersAttention(config, has_relative_attention_bias=True).eval()
    planted = SwitchDoubledQueries(config, has_relative_attention_bias=True).eval()
    planted.load_state_dict(original.state_dict())
    x = torch.rand(1, 8, 64, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        assert (planted(x)[0] - original(x)[0]).abs().max() > 1e-3
    assert Gemma4WrongScale.__mro__[1] is Gemma4TextAttention


@pytest.mark.slow
@pytest.mark.parametrize(("planted", "expected"), [(Gemma4WrongScale, ("scaling", "scaled_scores")),
                                                   (SwitchDoubledQueries, ("scaling", "scaled_scores"))])
def test_a_scale_planted_in_a_copy_of_a_declaring_class_is_still_found(planted, expected):
    result = attnlab.run(planted, overrides=SIZES)
    assert expected in errors(result), [f.message for f in result.findings]


@pytest.mark.slow
@pytest.mark.parametrize(("model", "overrides"), [
    ("codegen", []), ("deberta", []), ("xglm", []), ("seamless_m4t", []), ("seamless_m4t_v2", []),
    ("falcon", ["variant.params.new_decoder_architecture=true", "num_kv_heads=2"])])
def test_a_layout_the_class_declares_is_read_not_reported(model, overrides):
    assert errors(attnlab.run(f"hf:{model}", overrides=[*SIZES, *overrides])) == []


@pytest.mark.slow
def test_falcon_at_its_default_multi_query_config_runs_as_a_whole_model():
    """71 query heads and one key/value head in a fused query_key_value of width 4672 (one layer)."""
    result = attnlab.run(model="hf:falcon", overrides=["model.num_hidden_layers=1", "inputs=text",
                                                         "inputs.text=Every effort moves you"])
    assert errors(result) == [], [f.message for f in result.findings]
    assert (result.record.model.heads, result.record.model.kv_heads) == (71, 1)
    assert result.stages["queries"].shape == (1, 71, 4, 64)  # (B, nh, T, hs)
    assert result.stages["keys"].shape == (1, 1, 4, 64)  # (B, n_kv, T, hs)
    assert result.record.model.effect.kl_max == 0.0  # the default variant is the model's own class


class AlbertWrongScale(AlbertAttention):
    """Planted in a class that holds its residual and LayerNorm: the scores scaled by 0.5."""

    def __init__(self, config):
        super().__init__(config)
        self.scaling = 0.5


@pytest.mark.slow
def test_a_class_holding_its_residual_and_norm_names_its_output_not_observable_and_a_planted_scale_is_found():
    """ALBERT's attention returns LayerNorm(x + dense(context)): no output_path error on the library's
    class, every stage before the output still compared, so a wrong scale in a copy is still found."""
    own = attnlab.run("hf:albert", overrides=SIZES)
    assert errors(own) == [], [f.message for f in own.findings]
    assert [(f.code, f.stage) for f in own.findings] == [("not_observable", "output")]
    planted = attnlab.run(AlbertWrongScale, overrides=SIZES)
    assert ("scaling", "scaled_scores") in errors(planted), [f.message for f in planted.findings]


from transformers.models.cvt.modeling_cvt import CvtSelfAttention  # noqa: E402

_CVT = dict(num_heads=4, embed_dim=64, kernel_size=3, padding_q=1, padding_kv=1, stride_q=1, stride_kv=1,
            qkv_projection_method="dw_bn", qkv_bias=True, attention_drop_rate=0.0, with_cls_token=False)


class CvtHeadScale(CvtSelfAttention):
    """Planted: the book's 1/sqrt(head_dim) where CvT's class scales by its whole width's embed_dim ** -0.5."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.scale = (self.embed_dim // self.num_heads) ** -0.5


def test_cvt_s_planted_scale_is_real():
    """Independently of attnlab: the copy's outputs differ, and the class's scale is 1/sqrt(embed_dim)."""
    library, planted = CvtSelfAttention(**_CVT).eval(), CvtHeadScale(**_CVT).eval()
    planted.load_state_dict(library.state_dict())
    x = torch.rand(2, 16, 64, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        assert float((planted(x, 4, 4) - library(x, 4, 4)).abs().max()) > 1e-3
    assert library.scale == pytest.approx(64 ** -0.5)


@pytest.mark.slow
def test_a_scale_its_forward_multiplies_by_is_declared_and_a_planted_one_found():
    """CvT's `scale` (not `scaling`), over its whole width: info; the book's head scale planted: an error."""
    result = attnlab.run("hf:cvt", overrides=SIZES)
    assert ("scaling", "scaled_scores") not in errors(result), [f.message for f in result.findings]
    assert "declared_scale" in {f.code for f in result.findings}, [f.message for f in result.findings]
    assert ("scaling", "scaled_scores") in errors(attnlab.run(CvtHeadScale, overrides=SIZES))


from transformers.models.mgp_str.modeling_mgp_str import MgpstrAttention  # noqa: E402
from transformers.models.yoso.modeling_yoso import YosoSelfAttention  # noqa: E402

from attnlab.modules.hf_lineage import computes_no_softmax  # noqa: E402


def _sigmoid_normalised(self, dim):
    gates = torch.sigmoid(self)
    return gates / gates.sum(dim, keepdim=True)


class MgpstrNoSoftmax(MgpstrAttention):
    """Planted in a softmax class: its softmax replaced by sigmoids normalised per row (rows sum to 1)."""

    def forward(self, *args, **kwargs):
        torch.Tensor.softmax = _sigmoid_normalised  # shadows the method torch.Tensor inherits from TensorBase
        try:
            return super().forward(*args, **kwargs)
        finally:
            del torch.Tensor.softmax  # inherited again: a setattr back would leave a copy other tests see as replaced


def test_the_planted_normalisation_is_real_and_yoso_names_no_softmax():
    from transformers import MgpstrConfig

    config = MgpstrConfig(hidden_size=64, num_attention_heads=4)
    library, planted = MgpstrAttention(config).eval(), MgpstrNoSoftmax(config).eval()
    planted.load_state_dict(library.state_dict())
    x = torch.rand(2, 8, 64, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        assert float((planted(x)[0] - library(x)[0]).abs().max()) > 1e-4
    assert computes_no_softmax(YosoSelfAttention) and not computes_no_softmax(MgpstrAttention)


@pytest.mark.slow
def test_an_attention_without_a_softmax_by_design_is_declared():
    """YOSO's LSH expectation: info, not `not_softmax`; a softmax class's softmax dropped: still an error."""
    result = attnlab.run("hf:yoso", overrides=SIZES)
    assert errors(result) == [], [f.message for f in result.findings]
    assert ("no_softmax", "weights") in {(f.code, f.stage) for f in result.findings}
    assert ("not_softmax", "weights") in errors(attnlab.run(MgpstrNoSoftmax, overrides=SIZES))


def _gemma4_config():
    from transformers import Gemma4TextConfig

    return Gemma4TextConfig(hidden_size=64, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                            num_hidden_layers=2, intermediate_size=128, vocab_size=100)


def test_the_library_class_s_scale_is_read_from_a_build_that_draws_no_weights():
    from attnlab.modules.hf import _fresh, declared_scale

    config = _gemma4_config()
    real = Gemma4TextAttention(config, layer_idx=0)  # the library's own class, built for real: its scaling is 1.0
    fresh = _fresh(Gemma4TextAttention, config, 0)
    assert {p.device.type for p in fresh.parameters()} == {"meta"}
    assert fresh.scaling == real.scaling == 1.0
    assert declared_scale(real) == (1.0, "Gemma4TextAttention sets scaling = 1 in its constructor")


class _ReadsATensorsValue(LlamaAttention):
    """A constructor the meta device cannot run: it reads a value out of a tensor it made."""

    def __init__(self, config, layer_idx):
        super().__init__(config, layer_idx)
        self.scaling = float(torch.full((), 0.5))


def test_a_class_the_meta_device_cannot_build_is_built_for_real_for_its_scale():
    from transformers import LlamaConfig

    from attnlab.modules.hf import _fresh

    config = LlamaConfig(hidden_size=64, num_attention_heads=4, num_hidden_layers=2, intermediate_size=128,
                         vocab_size=100)
    with pytest.raises(RuntimeError), torch.device("meta"):
        _ReadsATensorsValue(config, 0)
    fresh = _fresh(_ReadsATensorsValue, config, 0)
    assert fresh.scaling == 0.5 and {p.device.type for p in fresh.parameters()} == {"cpu"}
