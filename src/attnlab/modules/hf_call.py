"""What a Hugging Face attention's model passes it besides the hidden states, made as the model
makes it: the mask in the class's own form (additive, keep-ones, a sequence-first decoder's), the
rotary class's (cos, sin), position ids, an ALiBi or MPT position bias, no cache."""

from __future__ import annotations

import copy
import inspect
import os
import re
import sys
from typing import Any

import torch
from torch import nn

from attnlab.modules import hf_grid, hf_inputs, hf_record
from attnlab.modules.arguments import adds_mask, forward_parameters
from attnlab.modules.class_cache import per_class
from attnlab.modules.families import GENERIC, family_of
from attnlab.modules.hf import HFError, declared_window, transformers_class
from attnlab.modules.hf_stage import grid_of
from attnlab.modules.roles import declared_count


def forward_kwargs(module: nn.Module, x: torch.Tensor) -> dict[str, Any]:
    """What the module's model passes its attention besides the hidden states: the mask from the
    model's mask function, the rotary class's (cos, sin), position ids and no cache."""
    accepted = inspect.signature(module.forward).parameters
    batch, tokens = x.shape[0], x.shape[-2]
    position_ids = torch.arange(tokens, device=x.device).expand(batch, tokens)  # (b, num_tokens)
    kwargs: dict[str, Any] = {}
    if "attention_mask" in accepted:
        kwargs["attention_mask"] = _mask(module, x, position_ids)
    elif "mask" in accepted and "position_bias" in accepted:  # T5-style classes' name (Pix2Struct's text attention)
        kwargs["mask"] = _mask(module, x, position_ids)
    elif "mask" in accepted and _keeps_ones(transformers_class(type(module))):
        kwargs["mask"] = _keep_mask(module, x)
    elif added := next((n for n in ("attn_mask", "causal_mask")
                        if n in accepted and adds_mask(transformers_class(type(module)) or type(module), n)), None):
        kwargs[added] = _sequence_mask(module, x)  # FSMT's attn_mask, added to its scores as its decoder's
    summed = added_positions(transformers_class(type(module)))
    kwargs.update({name: _added_positions(module, x) for name in summed})
    if "position_embeddings" in accepted and "position_embeddings" not in summed:
        kwargs["position_embeddings"] = _rotary(module, x, position_ids)
    if "position_ids" in accepted:
        kwargs["position_ids"] = position_ids
    if "alibi" in accepted:
        kwargs["alibi"] = _alibi(module, x)
    if family_of(module.config).arguments.get("is_causal") == "is_causal":
        kwargs["is_causal"] = mask_kind(module) != "bidirectional"  # the model's word over the class's attribute
    if "position_bias" in accepted and accepted["position_bias"].default is inspect.Parameter.empty:
        kwargs["position_bias"] = _position_bias(module, x)
    return kwargs | hf_inputs.made(module, x, kwargs)


def _position_bias(module: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """MPT's: the ALiBi bias its model passes as position_bias, (heads, 1, tokens), from its modeling
    file's build_..._alibi_tensor(num_heads, sequence_length, alibi_bias_max)."""
    modeling = sys.modules[type(module).__module__]
    build = next((f for name, f in vars(modeling).items() if name.startswith("build_") and name.endswith("alibi_tensor")
                  and inspect.isfunction(f) and list(inspect.signature(f).parameters)[:2] == ["num_heads",
                                                                                               "sequence_length"]),
                 None)
    if build is None:
        raise HFError(f"{type(module).__name__} needs a position_bias its modeling file has no alibi builder for")
    attn_config = getattr(module.config, "attn_config", None)
    bias_max = getattr(attn_config, "alibi_bias_max", 8)
    heads = declared_count(module, "num_heads")
    position_bias: torch.Tensor = build(heads, x.shape[-2], bias_max, device=x.device).to(x.dtype)
    return position_bias


def _alibi(module: nn.Module, x: torch.Tensor) -> torch.Tensor | None:
    """The ALiBi bias its model builds ((batch * heads, 1, tokens), the model file's own
    build_alibi_tensor), None where the config chose rotary positions (Falcon's alibi=False)."""
    if not getattr(module.config, "alibi", True):
        return None
    build = getattr(sys.modules[type(module).__module__], "build_alibi_tensor", None)
    if build is None:
        raise HFError(f"{type(module).__name__} takes an ALiBi bias its modeling file has no build_alibi_tensor for")
    alibi: torch.Tensor = build(torch.ones(x.shape[0], x.shape[-2], dtype=torch.long, device=x.device),
                                module.num_heads, x.dtype)
    return alibi


def mask_kind(module: nn.Module) -> str:
    """The mask its model builds: its family row's (families.py), else what the module declares
    (`is_causal`, a sliding window)."""
    row = family_of(module)
    if row is not GENERIC:
        return row.mask
    recorded = hf_record.recorded_mask_kind(module)  # the mask its model's call passes, where it is fed that call
    if recorded is not None:
        return recorded
    # its mask only pads: it attends both ways (read from the library's class: a copy that masks more is still found)
    if hf_inputs.padding_mask_only(transformers_class(type(module)) or type(module)):
        return "bidirectional"
    # the module's own word, else its config's (XLM's and Flaubert's `causal`, False for their masked LMs)
    declared = getattr(module, "is_causal", getattr(getattr(module, "config", None), "causal", None))
    if isinstance(declared, bool):
        return "causal" if declared else "bidirectional"
    if hf_record.recorded_no_mask(module):  # its model's call passes no mask at all
        return "bidirectional"
    # its tokens are an image's patches (SAM's grid, Swin's window, a config with a patch size): no order to mask by
    # (or a detection model's image features and object queries, made by its backbone)
    vision = any(getattr(getattr(module, "config", None), key, None) is not None
                 for key in ("patch_size", "patch_sizes", "image_size", "backbone_config"))
    if vision or hf_grid.axes(type(module)) is not None:
        return "bidirectional"
    origin = transformers_class(type(module))
    return "bidirectional" if origin is not None and (_takes_no_mask(origin) or _encoder_file(origin)) else "causal"


@per_class
def _takes_no_mask(cls: type[nn.Module]) -> bool:
    """Whether the library's class can mask nothing: its forward's source names no mask and nothing
    causal (BLIP's and MGP-STR's vision attention), so its model attends both ways. Read from the
    library's class, never the one attnlab runs: a copy that drops its mask is still compared with
    a causal reference."""
    try:
        source = inspect.getsource(cls.forward)
    except (TypeError, OSError):
        return False
    return "mask" not in source and "causal" not in source


_MASK_BUILDERS = re.compile(r"\bcreate_(\w+)_mask\(")


@per_class
def _encoder_file(cls: type[nn.Module]) -> bool:
    """Whether the library's class lives in a modeling file whose models build bidirectional masks
    only (`create_bidirectional_mask`, never a causal one: LUKE's and BROS's encoders), or none and never
    name one (no causal, tril or triu: Funnel's), so they attend both ways. Read from the library's
    file, as `_takes_no_mask`."""
    try:
        source = inspect.getsource(sys.modules[cls.__module__])
    except (TypeError, OSError, KeyError):
        return False
    built = set(_MASK_BUILDERS.findall(source))
    if not built:  # a file that never builds nor names a future mask (Funnel's, ConvBERT's): its models cannot hide it
        return _NO_FUTURE_MASK.search(source) is None
    return all(kind.startswith("bidirectional") for kind in built)


def _sequence_mask(module: nn.Module, x: torch.Tensor) -> torch.Tensor | None:
    """Its model's mask for x, made for (b, T) also when x is given (T, b, d) (FSMT's, sequence first)."""
    rows = x.transpose(0, 1) if x.dim() == 3 and hf_grid.sequence_first(module) else x  # (b, T, d)
    return _mask(module, rows, torch.arange(rows.shape[-2], device=x.device).expand(*rows.shape[:-1]))


_NO_FUTURE_MASK = re.compile(r"causal|tril|triu", re.IGNORECASE)
_KEEP_ONES = re.compile(r"\bmask\s*==\s*0\b|\bmask\.eq\(\s*0\s*\)")


@per_class
def _keeps_ones(cls: type[nn.Module] | None) -> bool:
    """Whether the library's class reads its `mask` as 1 where a query may look and drops where it is
    0 (XLM's and Flaubert's `(mask == 0)`), as its model's get_masks makes it. Read from the library's
    class, never the one attnlab runs: a copy that drops its mask is still given the model's."""
    try:
        return cls is not None and _KEEP_ONES.search(inspect.getsource(cls.forward)) is not None
    except (TypeError, OSError):
        return False


def _keep_mask(module: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """The mask its model makes in that form: (b, T, T), 1 where a query may look (every key, or the
    past and itself)."""
    keep = torch.ones(x.shape[-2], x.shape[-2], dtype=torch.long, device=x.device)
    keep = keep if mask_kind(module) == "bidirectional" else torch.tril(keep)
    return keep.expand(x.shape[0], *keep.shape)  # (b, T, T)


def _mask(module: nn.Module, x: torch.Tensor, position_ids: torch.Tensor) -> torch.Tensor | None:
    from transformers import masking_utils

    config = module.config
    kind = mask_kind(module)
    if hf_inputs.padding_mask_only(transformers_class(type(module)) or type(module)):
        return None  # no padding
    values = family_of(config).mask_values
    if values != "additive":  # DeBERTa's 1 keep / 0 drop, MPT's bool True drop
        keep = torch.ones(x.shape[-2], x.shape[-2], dtype=torch.bool, device=x.device)
        keep = keep if kind == "bidirectional" else torch.tril(keep)
        mask = keep.long() if values == "binary" else ~keep
        return mask.expand(x.shape[0], 1, *keep.shape)  # (b, 1, T, T)
    if kind == "bidirectional":
        make = (masking_utils.create_bidirectional_sliding_window_mask if _sliding_layer(module)
                else masking_utils.create_bidirectional_mask)
        bidirectional: torch.Tensor | None = make(config=config, inputs_embeds=x, attention_mask=None)
        return bidirectional
    make = masking_utils.create_causal_mask
    if kind == "chunked" and getattr(config, "attention_chunk_size", None):
        make = masking_utils.create_chunked_causal_mask
    window = declared_window(module)
    if window is not None:
        make = masking_utils.create_sliding_window_causal_mask
        config = _with_window(config, window)
    causal: torch.Tensor | None = make(config=config, inputs_embeds=x, attention_mask=None, position_ids=position_ids,
                                       **_no_cache(make))
    return causal


def _no_cache(make: Any) -> dict[str, None]:
    """The mask function's cache argument, off: `cache` from transformers 5.25, `past_key_values` before."""
    return {"cache" if "cache" in inspect.signature(make).parameters else "past_key_values": None}


def _sliding_layer(module: nn.Module) -> bool:
    """Whether the model gives this layer its sliding-window mask (ModernBERT's local layers): the
    config's layer type, as the model reads it, never the module's own window attribute."""
    types: list[str] = getattr(module.config, "layer_types", None) or []
    index = getattr(module, "layer_idx", None)
    return bool(types) and index is not None and types[index] == "sliding_attention"


def _with_window(config: Any, window: int) -> Any:
    """The config as the mask function reads it: Gemma's layer types make a model-level sliding
    window the mask of a sliding layer only, and the function reads `config.sliding_window`."""
    if getattr(config, "sliding_window", None) == window:
        return config
    config = copy.copy(config)
    config.sliding_window = window
    return config


@per_class
def added_positions(cls: type[nn.Module] | None) -> tuple[str, ...]:
    """The forward parameters the library's class adds to its hidden states before the query and
    key projections (DETR's sine or learned embeddings of image locations and object queries:
    `hidden_states + position_embeddings`, Table Transformer's `with_pos_embed(hidden_states,
    object_queries)`), where no rotary class is beside it. Read from the library's class, so a
    copy with a planted mistake is given what its model gives."""
    if cls is None or _rotary_class(cls) is not None:
        return ()
    parameters = [p.name for p in forward_parameters(cls)]
    if not parameters:
        return ()
    try:
        source = inspect.getsource(cls.forward)
    except (TypeError, OSError):
        return ()
    hidden = re.escape(parameters[0])
    added = re.findall(rf"\b{hidden}\s*\+\s*(\w+)|with_pos_embed\(\s*{hidden}\s*,\s*(\w+)\s*\)", source)
    return tuple(dict.fromkeys(n for pair in added for n in pair if n in parameters[1:]))


def _added_positions(module: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """The sine position embedding such a model adds (Vaswani et al.'s, as DETR's sine embedding
    makes it along each axis of its feature map), over the tokens' order: (b, T, d_in) (or (T, b,
    d_in) as x, for a sequence-first class), the same for every batch item, sin on the even
    coordinates and cos on the odd ones."""
    first = x.dim() == 3 and hf_grid.sequence_first(module)
    rows = x.transpose(0, 1) if first else x  # (b, T, d_in)
    tokens, width = rows.shape[-2], rows.shape[-1]
    position = torch.arange(tokens, dtype=torch.float32, device=x.device)[:, None]  # (T, 1)
    frequency = 10000.0 ** (-torch.arange(0, width, 2, dtype=torch.float32, device=x.device) / width)  # (d_in / 2,)
    angles = position * frequency  # (T, d_in / 2)
    embedding = torch.zeros(tokens, width, device=x.device)
    embedding[:, 0::2] = torch.sin(angles)
    embedding[:, 1::2] = torch.cos(angles[:, :width // 2])
    made = embedding.to(x.dtype).expand(*rows.shape[:-2], tokens, width)  # (b, T, d_in)
    return made.transpose(0, 1) if first else made


def _rotary(module: nn.Module, x: torch.Tensor, position_ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    rotary_cls = _rotary_class(type(module))
    if rotary_cls is None:
        raise HFError(f"{type(module).__name__} takes position_embeddings, but no RotaryEmbedding class was found "
                      f"beside it")
    rotary = rotary_cls(config=module.config).to(x.device)
    if next(iter(inspect.signature(rotary.forward).parameters)) == "pixel_values":  # DINOv3's: from the image's size
        return rotary(_pixels(module.config, x))  # type: ignore[no-any-return]
    if "layer_type" in inspect.signature(rotary.forward).parameters:  # Gemma3: one frequency set per layer type
        cos_sin: tuple[torch.Tensor, torch.Tensor] = rotary(x, position_ids, getattr(module, "layer_type", None)
                                                            or "full_attention")
        return cos_sin
    cos_sin = rotary(x, position_ids)
    return cos_sin


_ROTARY_NAMES = ("RotaryEmbedding", "RopePositionEmbedding")  # DINOv3's and Sapiens 2's name the second way


def _rotary_class(cls: type) -> type | None:
    """The `...RotaryEmbedding` class beside the module class (defined or imported in its file),
    else beside a class it derives from; of several, the one whose name shares the most of the
    class's (Gemma4TextAttention's Gemma4TextRotaryEmbedding, not the vision tower's)."""
    for klass in cls.__mro__:
        modeling = sys.modules.get(klass.__module__)
        found = [obj for name, obj in vars(modeling).items()
                 if name.endswith(_ROTARY_NAMES) and inspect.isclass(obj)] if modeling else []
        if found:
            return max(found, key=lambda obj: len(os.path.commonprefix([obj.__name__, klass.__name__])))
    return None


def _pixels(config: Any, x: torch.Tensor) -> torch.Tensor:
    """An image whose patches are the tokens after its model's class and register tokens, laid out on a
    grid (`hf_stage.grid_of`), for a rotary class that reads the patch grid off the pixels' size (DINOv3's,
    which leaves those first tokens unrotated): (b, channels, height * patch, width * patch)."""
    tokens, prefix = x.shape[-2], 1 + (getattr(config, "num_register_tokens", 0) or 0)
    prefix = prefix if tokens > prefix else min(1, tokens - 1)  # fewer tokens than those: the class token alone
    height, width = grid_of(tokens - prefix)
    patch = config.patch_size if isinstance(config.patch_size, int) else config.patch_size[0]
    return x.new_zeros(x.shape[0], getattr(config, "num_channels", 3), height * patch, width * patch)
