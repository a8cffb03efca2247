"""The small owning model attnlab records a call from: built without timm and without downloading."""

from __future__ import annotations

import importlib.util

import pytest
import torch

pytest.importorskip("transformers")

from transformers import DabDetrConfig  # noqa: E402
from transformers.models.dab_detr.modeling_dab_detr import DabDetrAttention, DabDetrModel  # noqa: E402

from attnlab.modules import hf_small  # noqa: E402


@pytest.mark.skipif(importlib.util.find_spec("timm") is not None, reason="timm installed: its backbone is buildable")
def test_a_timm_backbone_is_transformers_own_resnet_where_timm_is_missing():
    config = DabDetrConfig(d_model=64, encoder_attention_heads=4, decoder_attention_heads=4)
    assert config.backbone_config.model_type == "timm_backbone"
    with pytest.raises(ImportError):  # transformers' own build of its default fails without timm
        DabDetrModel(config)
    small = hf_small.shrunk(config, 0, 2)
    assert small.backbone_config.model_type == "resnet"
    assert list(small.backbone_config.out_indices) == [1, 2, 3, 4]
    assert config.backbone_config.model_type == "timm_backbone"  # the caller's config is left as it was
    model = hf_small.built(DabDetrModel, config, 0, torch.device("cpu"), torch.float32,
                           lambda m: isinstance(m, DabDetrAttention))
    assert any(type(m).__name__ == "ResNetBackbone" for m in model.modules())
    assert not getattr(model.config, "use_pretrained_backbone", False)
