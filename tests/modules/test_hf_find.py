"""Finding a type's attention class the way transformers organises it: the modeling module beside
its config class, the class its own model's layers build, a composite's text tower."""

from __future__ import annotations

import pytest

from attnlab.errors import UserError

transformers = pytest.importorskip("transformers")

from attnlab.modules import hf  # noqa: E402
from attnlab.modules.hf_find import attention_classes, modeling_module  # noqa: E402


@pytest.mark.parametrize(("model_type", "module", "expected"), [
    # the module's name is not the type's: data2vec-audio's lives in data2vec/modeling_data2vec_audio.py
    ("data2vec-audio", "transformers.models.data2vec.modeling_data2vec_audio", "Data2VecAudioAttention"),
    ("donut-swin", "transformers.models.donut.modeling_donut_swin", "DonutSwinSelfAttention"),
    # classes named unlike <Model>Attention: found by what the layers build
    ("led", "transformers.models.led.modeling_led", "LEDEncoderSelfAttention"),
    ("ctrl", "transformers.models.ctrl.modeling_ctrl", "MultiHeadAttention"),
    # a sub-config's classes live in the module of the model that owns it
    ("align_text_model", "transformers.models.align.modeling_align", "AlignTextSelfAttention"),
    ("altclip_text_model", "transformers.models.altclip.modeling_altclip", "AltRobertaSelfAttention"),
    # a wrapper's inner self-attention, chosen by name in the wrapper (`Cross if is_cross_attention else Self`)
    ("bert", "transformers.models.bert.modeling_bert", "BertSelfAttention"),
    # ...and through a dict of implementations
    ("gpt_neo", "transformers.models.gpt_neo.modeling_gpt_neo", "GPTNeoSelfAttention"),
    # never below a class with query and key projections of its own: what it builds inside is a part of it
    # (NeoMME's exclusive self-attention, applied to its output; DAB-DETR's decoder self-attention's inner one)
    ("neomme", "transformers.models.neomme.modeling_neomme", "NeoMMEAttention"),
    ("dab-detr", "transformers.models.dab_detr.modeling_dab_detr", "DetrAttention"),
    # not into a kernel the wrapper calls, which has no constructor and holds nothing (see below)
    ("grounding-dino", "transformers.models.grounding_dino.modeling_grounding_dino",
     "GroundingDinoMultiscaleDeformableAttention"),
])
def test_the_class_comes_from_the_module_beside_the_config(model_type: str, module: str, expected: str) -> None:
    cls, config_cls = hf.attention_class(model_type)
    assert (cls.__module__, cls.__name__) == (module, expected)
    assert config_cls is transformers.AutoConfig.for_model(model_type).__class__


def test_a_composite_runs_its_text_tower_and_names_the_others() -> None:
    cls, config_cls = hf.attention_class("clip")
    assert (cls.__name__, config_cls.__name__) == ("CLIPAttention", "CLIPTextConfig")
    assert hf.tower_note("clip") == "clip is a composite: its text tower; the others: hf:clip_vision_model"
    assert hf.tower_note("llama") == ""


def test_no_attention_class_only_where_the_model_builds_none() -> None:
    from transformers.models.resnet import configuration_resnet

    assert attention_classes(modeling_module(configuration_resnet.ResNetConfig)) == []
    with pytest.raises(UserError, match=r"^variant=hf:resnet: no attention class: ResNetModel builds no attention "
                                        r"module: a model without attention$"):
        hf.attention_class("resnet")
    # ALIGN's module defines the text tower's attention; its vision tower (EfficientNet) builds none of it
    with pytest.raises(UserError, match=r"AlignVisionModel builds no attention module"):
        hf.attention_class("align_vision_model")
    # an attention block not named ...Attention is named, not called "without attention"
    with pytest.raises(UserError, match=r"SLANetSLAHead builds no attention class attnlab runs .*it builds "
                                        r"SLANetAttentionGRUCell\)$"):
        hf.attention_class("slanet")


def test_an_attention_block_is_run_over_tokens_and_refused_over_a_feature_map() -> None:
    """Emu3's VQ-VAE attention block takes its config and projects token rows with nn.Linear: it is the
    type's class. Chameleon's, Janus's and Apertus 1.5's blocks project a (batch, channels, height, width)
    map with 1x1 convolutions inside their own GroupNorm and residual: one line says so, not "no attention
    class", and the survey counts it refused."""
    from attnlab.conformance.survey import refusal

    assert hf.attention_class("emu3_vqgan")[0].__name__ == "Emu3VQVAEAttentionBlock"
    for model_type in ("chameleon_vqgan", "janus_vqgan", "apertus1p5_vision_tokenizer"):
        with pytest.raises(UserError, match=r"builds \w+AttnBlock, a convolutional attention block over a \(batch, "
                                            r"channels, height, width\) feature map") as refused:
            hf.attention_class(model_type)
        assert "\n" not in str(refused.value) and refusal(str(refused.value)) == "refused"


@pytest.mark.parametrize(("model_type", "expected"), [
    ("zamba2", "Zamba2Attention"),  # its layers built in a method its __init__ calls: `self.layers = self.get_layers()`
    ("pp_ocrv5_mobile_rec", "PPOCRV5MobileRecAttention"),  # the base model is a backbone; its recognition head attends
    ("mimi", "MimiAttention"),  # its towers are configs it holds undeclared, built by AutoModel.from_config
])
def test_the_class_is_found_where_the_model_builds_it_beyond_its_init(model_type: str, expected: str) -> None:
    assert hf.attention_class(model_type)[0].__name__ == expected


def test_the_kernel_a_wrapper_calls_is_not_its_attention() -> None:
    """Grounding DINO's MultiScaleDeformableAttention is the sampling kernel its deformable attention
    calls: no constructor of its own, no parameter (checked here in plain torch), no query or key."""
    from transformers.models.grounding_dino.modeling_grounding_dino import MultiScaleDeformableAttention

    assert list(MultiScaleDeformableAttention().parameters()) == []
    assert hf.attention_class("grounding-dino")[0] is not MultiScaleDeformableAttention
