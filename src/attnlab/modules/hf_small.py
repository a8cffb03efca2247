"""The small owning model `hf_record` runs: its config shrunk where the attention never looks (the
layers after the recorded one, the vocabulary, the feed-forward widths, the experts), and built only
when its parameters fit a budget, so recording a call never builds a full-size model (a 6B-parameter
MoE at the survey's widths).

Shrinking is tried most first: a config whose own checks refuse a shrunk value (a layer pattern of
a fixed length, experts in groups) is tried with less shrunk, then as the module's own; each is
built on the meta device first, so its size is known before any memory is used.
"""

from __future__ import annotations

import copy
import importlib.util
import re
import sys
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from attnlab.modules import configs
from attnlab.modules.families import spellings

BUDGET = 60_000_000  # parameters a recording model may have (240 MB in float32)
VOCAB, WIDTH, EXPERTS = 512, 128, 4
FEED_FORWARD = ("ffn_dim", "encoder_ffn_dim", "decoder_ffn_dim", "n_inner", "d_ff", "dim_feedforward")
EXPERT_COUNTS = ("num_experts", "num_local_experts", "n_routed_experts", "moe_num_experts")
ROUTED = ("num_experts_per_tok", "moe_k", "num_experts_per_token")


def built(model_cls: type[nn.Module], config: Any, layer: int, device: torch.device, dtype: torch.dtype,
          holds: Callable[[nn.Module], bool]) -> nn.Module:
    """`model_cls` from the most shrunk form of `config` it can be built from within the budget and
    still `holds` the class (a model whose layer 0 is a convolution (LFM's) keeps its layers up to
    the first attention one); its own error, or a one-line size error, where none."""
    try:
        return _built(model_cls, config, layer, device, dtype, holds)
    except Exception as exc:
        filled = _filled(config, exc)
        if filled is not None:
            return built(model_cls, filled, layer, device, dtype, holds)
        # a width its defaults tie to a size attnlab set (SqueezeBERT's embedding_size); what its composite gives it
        for fixed in (configs.tied(config), completed(config)):
            try:
                if fixed is not None:
                    return _built(model_cls, fixed, layer, device, dtype, holds)
            except Exception:  # noqa: BLE001 - not this one: the next, else the first error
                continue
        raise


def completed(config: Any) -> Any | None:
    """A copy of `config` given the attributes a composite config of its file sets on its sub-config of
    that class and it lacks (T5Gemma2's decoder's dropout_rate, which only T5Gemma2Config sets), as that
    composite sets them by default; None where no composite adds any."""
    held = vars(config)
    for parent_cls in list(vars(sys.modules[type(config).__module__]).values()):
        keys = [k for k, sub in (getattr(parent_cls, "sub_configs", None) or {}).items() if sub is type(config)]
        if not keys or not isinstance(parent_cls, type):
            continue
        try:
            sub = getattr(parent_cls(), keys[0])
        except Exception:  # noqa: BLE001 - a composite that cannot be built bare gives nothing
            continue
        missing = {k: v for k, v in vars(sub).items() if k not in held and not k.startswith("_")}
        if missing:
            given = copy.deepcopy(config)
            for key, value in missing.items():
                setattr(given, key, value)
            return given
    return None


def _filled(config: Any, exc: Exception) -> Any | None:
    """A copy of `config` with the lengths its model's error names as needed and the config leaves None
    (Autoformer's `prediction_length`) set to its context length, the run's tokens; None where none."""
    context = next((v for key in spellings("context_length") if isinstance(v := getattr(config, key, None), int)), None)
    needed = [name for name in re.findall(r"[`'\"](\w+_length)[`'\"]", str(exc))
              if name in vars(config) and vars(config)[name] is None]
    if context is None or not needed:
        return None
    filled = copy.deepcopy(config)
    for name in needed:
        setattr(filled, name, context)
    return filled


def _built(model_cls: type[nn.Module], config: Any, layer: int, device: torch.device, dtype: torch.dtype,
           holds: Callable[[nn.Module], bool]) -> nn.Module:
    problem: Exception | None = None
    for level in (2, 1, 0):
        try:
            with torch.device("meta"):
                small = shrunk(config, layer, level)
                if level and not any(holds(m) for m in model_cls(small).modules()):
                    full = model_cls(shrunk(config, 10**6, level))  # its layers all there: the first that holds it
                    small = shrunk(config, next(i for i, m in enumerate(_layers(full)) if any(map(holds, m.modules()))),
                                   level)
                size = sum(p.numel() for p in model_cls(small).parameters())
        except Exception as exc:  # noqa: BLE001 - a config its own checks refuse at this shrinking: less shrunk
            problem = problem or exc
            continue
        if size > BUDGET:
            raise ValueError(f"{size / 1e6:.0f}M parameters even with its layers, vocabulary and experts shrunk")
        # the run's dtype on its real tensors only: a complex buffer (Llama 4 vision's freqs_ci) cast to it loses its sines
        model = model_cls(small).to(device=device)
        model._apply(lambda t: t.to(dtype) if t.is_floating_point() else t)
        return model.eval()
    assert problem is not None
    raise problem


def _layers(model: nn.Module) -> nn.ModuleList:
    """The model's longest list of layers (its decoder's or encoder's)."""
    return max((m for m in model.modules() if isinstance(m, nn.ModuleList)), key=len)


def shrunk(config: Any, layer: int, level: int) -> Any:
    """A copy of `config` (eager attention): level 0 as it is, 1 with the layers after `layer` cut,
    2 also with a small vocabulary, feed-forward, expert count and other depths; its sub-configs alike."""
    small = copy.deepcopy(config)
    small._attn_implementation = getattr(config, "_attn_implementation", None) or "eager"
    held = vars(small)  # its own values: a per-layer config (Dots3's) refuses reading a global one
    types = held.get("layer_types")
    context = next((v for key in spellings("context_length") if isinstance(v := held.get(key), int)), None)
    if "sliding_window" in held and held["sliding_window"] is None and isinstance(types, (list, tuple)) \
            and "sliding_attention" not in types and isinstance(context, int):
        # no layer slides, yet its model builds the sliding mask (Step3.7's): a window of its whole context masks nothing
        small.sliding_window = context
    if level:
        _shrink(small, layer, level)
    return small


def _native_backbone(config: Any) -> None:
    """A backbone its model would build with timm (DETR's and DAB-DETR's default `timm_backbone`
    ResNet) where timm is not installed: transformers' own ResNet at the same stages instead; and
    never pretrained weights, which would be downloaded."""
    from transformers import PretrainedConfig, ResNetConfig

    if getattr(config, "use_pretrained_backbone", False):
        config.use_pretrained_backbone = False
    backbone = getattr(config, "backbone_config", None)
    if isinstance(backbone, PretrainedConfig) and backbone.model_type == "timm_backbone" \
            and importlib.util.find_spec("timm") is None:
        stages: dict[str, Any] = {"out_indices": list(getattr(backbone, "out_indices", None) or [4]),
                                  "num_channels": getattr(backbone, "num_channels", 3)}  # a BackboneConfigMixin's
        config.backbone_config = ResNetConfig(**stages)
        if getattr(config, "use_timm_backbone", False):
            config.use_timm_backbone = False


def _shrink(config: Any, layer: int, level: int) -> None:
    from transformers import PretrainedConfig

    _native_backbone(config)
    for value in list(vars(config).values()):
        if isinstance(value, PretrainedConfig):
            _shrink(value, 0, level)
    for key in spellings("num_layers"):
        count = getattr(config, key, None)
        if isinstance(count, int) and count > layer + 1:
            setattr(config, key, layer + 1)
            for name, value in list(vars(config).items()):  # per-layer lists (layer_types) cut alike
                if isinstance(value, (list, tuple)) and len(value) == count and not name.startswith("_"):
                    setattr(config, name, type(value)(value[:layer + 1]))
    if level < 2:
        return
    _smaller(config, [k for k in vars(config) if k.endswith("vocab_size")], VOCAB)  # LUKE's entity_vocab_size too
    if "vocab_size" in vars(config) and config.vocab_size is None:  # ESM's, left to a checkpoint: the ids attnlab makes fit
        config.vocab_size = VOCAB
    if isinstance(getattr(config, "pad_token_id", None), int) and config.pad_token_id >= VOCAB:
        config.pad_token_id = None  # its padding row past the smaller vocabulary
    _smaller(config, [k for k in vars(config) if k.endswith("intermediate_size")] + list(FEED_FORWARD), WIDTH)
    _smaller(config, EXPERT_COUNTS, EXPERTS)
    # the depths of what the model holds beside its layers (Evolla's protein resampler, aligner layers); never
    # one a per-layer list's length ties (SEW-D's num_feat_extract_layers, its conv_dim's): it keeps its own
    lengths = {len(v) for k, v in vars(config).items() if isinstance(v, (list, tuple)) and not k.startswith("_")}
    _smaller(config, [k for k, v in vars(config).items() if k.endswith(("depth", "_layers"))
                      and k not in spellings("num_layers") and not (isinstance(v, int) and v in lengths)], 1)
    _smaller(config, ROUTED, 2)


def _smaller(config: Any, keys: Any, bound: int) -> None:
    for key in keys:
        value = getattr(config, key, None)
        if isinstance(value, int) and not isinstance(value, bool) and value > bound:
            setattr(config, key, bound)


def rope_at(config_cls: type, module_cls: type, head_dim: int) -> dict[str, Any] | None:
    """The config's multimodal rotary sections (`mrope_section`: its own, else the default its
    model's rotary class sets, Qwen2-VL's [16, 24, 24] for heads of 128) rescaled to the heads
    attnlab sizes: their sum is half the rotated width, as the model's rotary splits its (cos,
    sin); None where the config has none or they already fit."""
    try:
        default = config_cls()
    except Exception:  # noqa: BLE001 - a config that needs arguments holds no default sections
        return None
    rope = getattr(default, "rope_parameters", None)
    if not isinstance(rope, dict):
        return None
    sections = rope.get("mrope_section")
    if sections is None:  # its rotary class's own default (PaddleOCR-VL's config declares none)
        sections = _rotary_sections(module_cls, default)
    partial = rope.get("partial_rotary_factor", getattr(default, "partial_rotary_factor", None) or 1.0)
    half = int(head_dim * partial) // 2
    if sections == []:
        # a rotary class that splits by sections its config leaves unset (HunYuan-VL's, None): one section; a
        # text token's position is the same on every axis, so any partition gives the same angles
        return {**rope, "mrope_section": [half]}
    if not isinstance(sections, (list, tuple)) or not sum(sections):
        return None
    if sum(sections) == half or getattr(default, "qk_rope_head_dim", None):
        return None  # they fit, or they follow a rotary width of its own (HY-V4-VL's qk_rope_head_dim), left as they are
    scaled = [s * half // sum(sections) for s in sections]
    scaled[-1] += half - sum(scaled)  # what rounding down left goes to the last section
    return {**rope, "mrope_section": scaled}


def _rotary_sections(module_cls: type, config: Any) -> list[int] | None:
    """The `mrope_section` a rotary class of the module's modeling file sets from `config`; [] where
    it has the attribute but `config` leaves it None."""
    modeling = sys.modules[module_cls.__module__]
    unset = False
    for name, cls in vars(modeling).items():
        if name.endswith("RotaryEmbedding") and isinstance(cls, type):
            try:
                rotary = cls(config=config)
            except Exception:  # noqa: BLE001 - a rotary class of another tower (the vision one's): not this one
                continue
            sections = getattr(rotary, "mrope_section", None)
            if sections is not None:
                return list(sections)
            unset = unset or hasattr(rotary, "mrope_section")
    return [] if unset else None
