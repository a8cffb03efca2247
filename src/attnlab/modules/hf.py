"""Hugging Face attention classes: `variant=hf:MODEL_TYPE`, and how any of them is called.

`hf:llama` is the attention class of that model type (LlamaAttention), built from its own config
class (LlamaConfig) filled from the top-level keys; nothing is downloaded, ever.
`attn_implementation` (eager | sdpa | flex_attention) picks its kernel. A Hugging Face attention
module is called as its model calls it: the model's own mask function (causal, sliding-window,
or bidirectional, as the module and its config declare) makes the 4-D additive mask, the model's
own rotary class the `position_embeddings`.

transformers is the optional extra `attnlab[hf]`; without it an `hf:` name is a one-line error.
"""

from __future__ import annotations

import copy
import difflib
import inspect
import os
import re
import sys
from functools import cache
from typing import Any

import torch
from torch import nn

from attnlab.errors import UserError
from attnlab.modules import hf_capture, hf_grid, hf_init, hf_inputs, hf_lineage, hf_record, hf_small, hf_stage
from attnlab.modules.arguments import adds_mask
from attnlab.modules.configs import CONFIG_SPELLINGS, ConfigConstructor, config_class
from attnlab.modules.families import GENERIC, Family, family, family_of, spellings
from attnlab.modules.families.adapter import BY_SIZE, CONFIG_AND_LAYER
from attnlab.modules.hf_build import UNKNOWN as _UNKNOWN
from attnlab.modules.hf_build import model_arguments
from attnlab.modules.hf_find import Found, NotFound, find
from attnlab.modules.hf_lineage import transformers_class as transformers_class  # re-exported: callers read it here
from attnlab.modules.roles import declared_count
from attnlab.schema import ATTN_IMPLEMENTATIONS

PREFIX = "hf:"
PROVIDED = ("alibi", "position_bias")  # forward arguments only a Hugging Face module's call builds (and hf_inputs')
IMPLEMENTATIONS = ATTN_IMPLEMENTATIONS


class HFError(UserError):
    """An `hf:` name that cannot be resolved, or transformers missing."""


def _transformers() -> Any:
    try:
        import transformers
    except ImportError:
        raise HFError("variant=hf:...: needs transformers; pip install 'attnlab[hf]'") from None
    transformers.logging.set_verbosity_error()  # its notices on the config attnlab sized are not the user's concern
    return transformers


@cache
def attention_class(model_type: str) -> tuple[type[nn.Module], type]:
    """(attention class, config class) of a model type: `llama` -> (LlamaAttention, LlamaConfig),
    found as transformers organises it (attnlab.modules.hf_find): the modeling module beside the
    config class, the self-attention class its layers build; a composite's text tower."""
    found = _found(model_type)
    return found.module_cls, found.config_cls


def _found(model_type: str) -> Found:
    _transformers()
    # transformers is optional and takes seconds to import: only when an hf: name is used
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    if model_type not in CONFIG_MAPPING:
        close = difflib.get_close_matches(model_type, list(CONFIG_MAPPING.keys()), n=1)
        hint = f"; did you mean 'hf:{close[0]}'?" if close else ""
        raise HFError(f"variant=hf:{model_type}: transformers knows no model type '{model_type}'{hint}")
    try:
        return find(model_type, family(model_type).attention_class, CONFIG_SPELLINGS["d_in"])
    except NotFound as exc:
        raise HFError(f"variant=hf:{model_type}: no attention class: {exc}") from None


def tower_note(model_type: str) -> str:
    """What `hf:TYPE` runs of a composite (its text tower) and the others it holds; "" for one class."""
    return _found(model_type).note


class _Unevaluated(HFError):
    """A positional argument the model computes by code attnlab cannot evaluate alone."""


def build_attention(module_cls: type[nn.Module], config: Any, layer: int = 0, in_model: bool = False,
                    tokens: int | None = None, sizes: dict[str, Any] | None = None, **extra: Any) -> nn.Module:
    """`module_cls` built as its model builds it (`_declared`); where that fails (a value per layer,
    a class its model builds from another sub-config, code attnlab cannot evaluate), with the
    arguments its model passes it, captured from the model's own build (`hf_capture`; `sizes`:
    attnlab's, for a sub-config attnlab did not fill). Where neither builds it, one line naming how
    each failed: the model's own build with the same config failing is transformers' failure, not attnlab's."""
    try:
        return _declared(module_cls, config, layer, in_model, tokens, **extra)
    except (_Unevaluated, TypeError, AttributeError, ValueError, KeyError, IndexError) as exc:
        base = transformers_class(module_cls)
        if base is None:
            raise
        first = f"{type(exc).__name__}: {' '.join(str(exc).split())}"[:160]
        try:
            found = hf_capture.captured(base, config, layer, sizes)
        except hf_capture.NotCaptured as why:
            if not str(why):  # no model of its modeling file builds it: the first way's error alone
                raise exc from None
            raise HFError(f"{module_cls.__name__} cannot be built from its config ({first}), nor is it reached by "
                          f"building its model with that config ({why})") from None
    try:
        return module_cls(*found.args, **found.kwargs)
    except Exception as again:  # noqa: BLE001 - the class's own failure on exactly its model's arguments
        raise HFError(f"{module_cls.__name__} cannot be built from its config: it fails on the very arguments "
                      f"{found.model} passes it ({type(again).__name__}: {' '.join(str(again).split())})"[:400]) from None


def _declared(module_cls: type[nn.Module], config: Any, layer: int = 0, in_model: bool = False,
              tokens: int | None = None, **extra: Any) -> nn.Module:
    """`module_cls` built as its model's own layer builds it, by the keywords its family declares
    (`LlamaAttention(config=config, layer_idx=0)`), never from its signature: transformers 5.25
    wraps the constructors, and a wrapped one names no parameters. `in_model`: for a layer of the
    whole model, whose sizes are under the adapter's model spellings; `tokens`: the run's, which a
    hierarchical vision model's stage and window are chosen for (`hf_stage`); `extra` sets a declared keyword."""
    row = family_of(config)
    if row is GENERIC:  # a copy of a family's class (UDOP's, Switch Transformers' of T5's) is built as that family builds it
        origin = family(hf_lineage.origin_type(module_cls) or "")
        # unless its constructor takes what that family's does not (SwinAttention's sizes beside ViT's config)
        row = origin if set(hf_stage.required_parameters(module_cls)) <= set(origin.constructor) else GENERIC
    base = transformers_class(module_cls)
    if row is GENERIC and base is not None:
        # a family without an adapter: built as its model's own code builds it (attnlab.modules.hf_build), a
        # subclass of its class (a planted copy) with the arguments the model gives that class
        found = model_arguments(base, config, layer, tokens)
        if found is not None:
            args, kwargs = found
            return _built(module_cls, args, {**kwargs, **{k: v for k, v in extra.items() if k in kwargs}}, tokens)
    constructor = _guessed_constructor(module_cls) if row is GENERIC else row.constructor
    kwargs = {keyword: config if source == "config" else extra.get(keyword, layer) if source == "layer"
              else _config_value(config, row, source, in_model) for keyword, source in constructor.items()}
    return module_cls(**kwargs)


def _built(module_cls: type[nn.Module], args: list, kwargs: dict[str, Any], tokens: int | None) -> nn.Module:
    """The class built from its model's arguments; a keyword the model's code computes from what
    attnlab does not build is left to its default (a missing one: the constructor's own one-line error)."""
    if any(a is _UNKNOWN for a in args):
        raise _Unevaluated(f"{module_cls.__name__} cannot be built from its config alone: its model passes a positional "
                      f"argument from code attnlab cannot evaluate")
    try:
        return module_cls(*args, **{k: v for k, v in kwargs.items() if v is not _UNKNOWN})
    except TypeError as exc:
        window = hf_stage.refused_window(module_cls, tokens, exc)
        if window is None:
            raise
        raise HFError(window) from None


def _guessed_constructor(module_cls: type) -> dict[str, str]:
    """The generic adapter's guess for a family without a file: the keywords of the constructor's
    signature it knows (M2M100's sizes by name, DistilBERT's config alone), or the generic adapter's
    own `(config=..., layer_idx=...)` where the signature names none (a wrapped constructor)."""
    try:
        named = [p.name for p in inspect.signature(module_cls).parameters.values()
                 if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
    except (TypeError, ValueError):
        named = []
    known = {**CONFIG_AND_LAYER, **BY_SIZE}
    return {name: known[name] for name in named if name in known} if named else dict(GENERIC.constructor)


def _config_value(config: Any, row: Family, key: str, in_model: bool = False) -> Any:
    """attnlab's `key` as the config holds it, under the family's spelling first (its model's first in a model)."""
    own = row.model_spellings.get(key, ()) if in_model else ()
    found = (getattr(config, s, None) for s in (*own, *spellings(key, row.name)))
    return next((value for value in found if value is not None), None)


class HFConstructor(ConfigConstructor):
    """A Hugging Face attention class built from its config, with `attn_implementation` set."""

    def constructor_parameters(self) -> list[str]:
        """A transformers class's: its family's declared keywords a variant may set, the layer index."""
        if transformers_class(self.module_cls) is None:
            return super().constructor_parameters()
        row = family_of(self.config_cls)
        return [keyword for keyword, source in row.constructor.items() if source == "layer"]

    tokens: int | None = None  # the run's token count, for a class built for it (`hf_stage.sized_by_tokens`)
    sizes: dict[str, Any] | None = None  # the run's d_in, d_out, num_heads, for a sub-config its model builds it from

    def config(self, values: dict[str, Any], params: dict[str, Any], private: dict[str, Any] | None = None) -> Any:
        """The config, its multimodal rotary sections fitted to the heads attnlab sizes (`hf_small.rope_at`)."""
        origin = transformers_class(self.module_cls)
        rope = None if "rope_parameters" in params or origin is None else hf_small.rope_at(
            self.config_cls, origin, values["d_out"] // (values.get("num_heads") or 1))
        config = super().config(values, {**params, **({"rope_parameters": rope} if rope else {})}, private)
        if getattr(config, "is_heterogeneous", False):
            # a per-layer config (Dots3's) holds attnlab's sizes globally, which the layer built without an
            # override of its own reads: attnlab reads them there as well, never refused as ambiguous
            config.allow_global_per_layer_attribute_access = True
        return config

    def construct(self, config: Any, extra: dict[str, Any]) -> nn.Module:
        if transformers_class(self.module_cls) is None:
            return super().construct(config, extra)
        return build_attention(self.module_cls, config, tokens=self.tokens, sizes=self.sizes, **extra)

    def _by_tokens(self) -> bool:
        """It takes the run's tokens as context_length though its config has no spelling for it."""
        return not self.spelled["context_length"] and hf_stage.sized_by_tokens(self.module_cls, self.attributes)

    def __call__(self, d_in: int, d_out: int, num_heads: int | None = None, **keys: Any) -> nn.Module:
        implementation = keys.pop("attn_implementation", None) or "eager"
        if implementation not in IMPLEMENTATIONS:
            raise HFError(f"attn_implementation={implementation}: allowed are {', '.join(IMPLEMENTATIONS)}")
        sizes = {"d_in": d_in, "d_out": d_out, "num_heads": num_heads}
        private = {"_attn_implementation": implementation}
        builder = copy.copy(self)  # this build's tokens and sizes, not the constructor's
        builder.sizes = sizes
        builder.tokens = keys.pop("context_length", None) if self._by_tokens() else keys.get("context_length")
        module = hf_init.initialised(builder.build(sizes, keys, private))
        if not hasattr(module, "config"):  # MPT's keeps none: held so it is called as its model calls it
            module.config = self.config({**sizes, **{k: v for k, v in keys.items() if k in CONFIG_SPELLINGS}},
                                        {k: v for k, v in keys.items() if k not in CONFIG_SPELLINGS}, private)
        return module

    @property
    def __signature__(self) -> inspect.Signature:
        base = super().__signature__
        parameters = list(base.parameters.values())
        kind = inspect.Parameter.POSITIONAL_OR_KEYWORD
        extra = [inspect.Parameter("attn_implementation", kind, default=None)]
        if self._by_tokens():
            extra.append(inspect.Parameter("context_length", kind, default=None))
        return base.replace(parameters=[*parameters[:-1], *extra, parameters[-1]])


def hf_constructor(name: str) -> HFConstructor:
    """The constructor of `hf:MODEL_TYPE`."""
    model_type = name.removeprefix(PREFIX)
    module_cls, config_cls = attention_class(model_type)
    return HFConstructor(module_cls, config_cls, name)


def config_constructor(cls: type[nn.Module], name: str) -> ConfigConstructor | None:
    """How a plugin class built from one config object is built (a Hugging Face class, a subclass or
    copy of one, with its attn_implementation), else None: the class takes `(d_in, d_out, ...)`."""
    found = _transformers_config(cls) or config_class(cls)
    if found is None:
        return None
    transformers = sys.modules.get("transformers")
    if transformers is not None and issubclass(found, transformers.PretrainedConfig):
        return HFConstructor(cls, found, name)
    return ConfigConstructor(cls, found, name)


def missing_packages(cls: type) -> list[str]:
    """The optional packages the modeling file of `cls` asks for (`is_natten_available()`) that
    transformers finds missing."""
    import transformers.utils

    source = inspect.getsource(inspect.getmodule(cls) or cls)
    asked = sorted(set(re.findall(r"\bis_(\w+)_available\(", source)))
    return [name for name in asked if not getattr(transformers.utils, f"is_{name}_available", lambda: True)()]


def _transformers_config(cls: type) -> type | None:
    """The config class of the transformers attention class `cls` is or derives from: the model
    type whose `hf:` class it is, among the types of its modeling file (Gemma3Attention's
    Gemma3TextConfig). Never read off its constructor, which transformers may wrap."""
    origin = transformers_class(cls)
    if origin is None:
        return None
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING, model_type_to_module_name

    module_name = origin.__module__.split(".")[2]
    for model_type in [t for t in CONFIG_MAPPING.keys() if model_type_to_module_name(t) == module_name]:
        try:
            attention, config_cls = attention_class(model_type)
        except HFError:
            continue
        if attention is origin:
            return config_cls
    return None


def is_hf_module(module: nn.Module) -> bool:
    """A module holding a Hugging Face config: it is called as its model calls it."""
    transformers = sys.modules.get("transformers")
    config = getattr(module, "config", None)
    return transformers is not None and isinstance(config, transformers.PretrainedConfig)


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
    if "position_embeddings" in accepted:
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


def provided(cls: Any) -> tuple[str, ...]:
    """The required forward parameters a Hugging Face class's model call provides beside attnlab's own."""
    return (*PROVIDED, *hf_inputs.provided(cls), *hf_record.provided(cls))


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
    return build(heads, x.shape[-2], bias_max, device=x.device).to(x.dtype)


def _alibi(module: nn.Module, x: torch.Tensor) -> torch.Tensor | None:
    """The ALiBi bias its model builds ((batch * heads, 1, tokens), the model file's own
    build_alibi_tensor), None where the config chose rotary positions (Falcon's alibi=False)."""
    if not getattr(module.config, "alibi", True):
        return None
    build = getattr(sys.modules[type(module).__module__], "build_alibi_tensor", None)
    if build is None:
        raise HFError(f"{type(module).__name__} takes an ALiBi bias its modeling file has no build_alibi_tensor for")
    return build(torch.ones(x.shape[0], x.shape[-2], dtype=torch.long, device=x.device), module.num_heads, x.dtype)


def declared_window(module: nn.Module) -> int | None:
    """The sliding window the module (Gemma's per layer) or else its config (Mistral's) declares."""
    if hasattr(module, "sliding_window"):
        return module.sliding_window
    config = module.config
    if getattr(config, "layer_types", None) and getattr(module, "layer_idx", None) is not None:
        if config.layer_types[module.layer_idx] != "sliding_attention":
            return None
    return getattr(config, "sliding_window", None)


def declared_clip(module: nn.Module) -> tuple[float, str] | None:
    """The bound the module's config clamps queries, keys and values to (OLMo's and OLMoE's
    clip_qkv), and where it says so; None: no clamp."""
    config = getattr(module, "config", None)
    spelling = next((s for s in spellings("clip", getattr(config, "model_type", "")) if getattr(config, s, None)), None)
    return (float(getattr(config, spelling)), f"{spelling}={getattr(config, spelling)}") if spelling else None


def declared_scale(module: nn.Module) -> tuple[float, str] | None:
    """The factor on the scores the module's config (or the module, from its constructor) declares
    instead of 1/sqrt(head_dim), and where it says so, under any spelling the adapters know: a
    dimension the scores are scaled by the inverse square root of (Gemma's query_pre_attn_scalar,
    attention_scores_scalar), a factor (Granite's attention_multiplier), GPT-2's scale_attn_weights=False
    and scale_attn_by_inverse_layer_idx. None: the usual 1/sqrt(head_dim). Never read from the
    module's own `scaling` (code could set that wrongly)."""
    config = getattr(module, "config", None)
    origin = transformers_class(type(module))
    row = family_of(config)
    if row is GENERIC and origin is not None:  # a copy of a family's class (UDOP's of T5's) scales as that family
        row = family(hf_lineage.origin_type(origin) or "")
    if row.scaling is not None:
        return row.scaling, f"{row.name} scales its scores by {row.scaling:g} (its family adapter)"
    holders = [h for h in (config, module) if h is not None]
    for spelling in spellings("scale_dim", row.name):
        scalar = next((getattr(h, spelling) for h in holders if getattr(h, spelling, None)), None)
        if scalar:
            return scalar ** -0.5, f"{spelling} = {scalar:g}: 1/sqrt({scalar:g})"
    for spelling in spellings("scale", row.name):
        factor = next((getattr(h, spelling) for h in holders if getattr(h, spelling, None)), None)
        if factor:
            return float(factor), f"{spelling} = {factor:g}"
    if getattr(config, "scale_attn_weights", True) is False:
        return 1.0, "scale_attn_weights = False: no scaling"
    if getattr(config, "scale_attn_by_inverse_layer_idx", False):
        layer = getattr(module, "layer_idx", 0) or 0
        head_dim = _config_value(config, row, "d_in") // _config_value(config, row, "num_heads")
        return head_dim ** -0.5 / (layer + 1), f"scale_attn_by_inverse_layer_idx: 1/sqrt(head_dim) / {layer + 1}"
    scale = hf_lineage.library_scale(module, origin, lambda cls, c, i: build_attention(cls, c, layer=i))
    if scale is None and origin is not None and hf_lineage.names_no_scale(origin):
        return 1.0, f"{origin.__name__} applies no scale to its scores (its code names none)"
    return scale


def mask_kind(module: nn.Module) -> str:
    """The mask its model builds: its family row's (families.py), else what the module declares
    (`is_causal`, a sliding window)."""
    row = family_of(module)
    if row is not GENERIC:
        return row.mask
    # its mask only pads: it attends both ways (read from the library's class: a copy that masks more is still found)
    if hf_inputs.padding_mask_only(transformers_class(type(module)) or type(module)):
        return "bidirectional"
    # the module's own word, else its config's (XLM's and Flaubert's `causal`, False for their masked LMs)
    declared = getattr(module, "is_causal", getattr(getattr(module, "config", None), "causal", None))
    if isinstance(declared, bool):
        return "causal" if declared else "bidirectional"
    # its tokens are an image's patches (SAM's grid, Swin's window, a config with a patch size): no order to mask by
    vision = any(getattr(getattr(module, "config", None), key, None) is not None for key in ("patch_size", "patch_sizes", "image_size"))
    if vision or hf_grid.axes(type(module)) is not None:
        return "bidirectional"
    origin = transformers_class(type(module))
    return "bidirectional" if origin is not None and _takes_no_mask(origin) else "causal"


@cache
def _takes_no_mask(cls: type) -> bool:
    """Whether the library's class can mask nothing: its forward's source names no mask and nothing
    causal (BLIP's and MGP-STR's vision attention), so its model attends both ways. Read from the
    library's class, never the one attnlab runs: a copy that drops its mask is still compared with
    a causal reference."""
    try:
        source = inspect.getsource(cls.forward)
    except (TypeError, OSError):
        return False
    return "mask" not in source and "causal" not in source


def _sequence_mask(module: nn.Module, x: torch.Tensor) -> torch.Tensor | None:
    """Its model's mask for x, made for (b, T) also when x is given (T, b, d) (FSMT's, sequence first)."""
    rows = x.transpose(0, 1) if x.dim() == 3 and hf_grid.sequence_first(module) else x  # (b, T, d)
    return _mask(module, rows, torch.arange(rows.shape[-2], device=x.device).expand(*rows.shape[:-1]))


_KEEP_ONES = re.compile(r"\bmask\s*==\s*0\b|\bmask\.eq\(\s*0\s*\)")


@cache
def _keeps_ones(cls: type | None) -> bool:
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
        return make(config=config, inputs_embeds=x, attention_mask=None)
    make = masking_utils.create_causal_mask
    if kind == "chunked" and getattr(config, "attention_chunk_size", None):
        make = masking_utils.create_chunked_causal_mask
    window = declared_window(module)
    if window is not None:
        make = masking_utils.create_sliding_window_causal_mask
        config = _with_window(config, window)
    return make(config=config, inputs_embeds=x, attention_mask=None, position_ids=position_ids, **_no_cache(make))


def _no_cache(make: Any) -> dict[str, None]:
    """The mask function's cache argument, off: `cache` from transformers 5.25, `past_key_values` before."""
    return {"cache" if "cache" in inspect.signature(make).parameters else "past_key_values": None}


def _sliding_layer(module: nn.Module) -> bool:
    """Whether the model gives this layer its sliding-window mask (ModernBERT's local layers): the
    config's layer type, as the model reads it, never the module's own window attribute."""
    types = getattr(module.config, "layer_types", None)
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


def _rotary(module: nn.Module, x: torch.Tensor, position_ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    rotary_cls = _rotary_class(type(module))
    if rotary_cls is None:
        raise HFError(f"{type(module).__name__} takes position_embeddings, but no RotaryEmbedding class was found "
                      f"beside it")
    rotary = rotary_cls(config=module.config).to(x.device)
    if "layer_type" in inspect.signature(rotary.forward).parameters:  # Gemma3: one frequency set per layer type
        return rotary(x, position_ids, getattr(module, "layer_type", None) or "full_attention")
    return rotary(x, position_ids)


def _rotary_class(cls: type) -> type | None:
    """The `...RotaryEmbedding` class beside the module class (defined or imported in its file),
    else beside a class it derives from; of several, the one whose name shares the most of the
    class's (Gemma4TextAttention's Gemma4TextRotaryEmbedding, not the vision tower's)."""
    for klass in cls.__mro__:
        modeling = sys.modules.get(klass.__module__)
        found = [obj for name, obj in vars(modeling).items()
                 if name.endswith("RotaryEmbedding") and inspect.isclass(obj)] if modeling else []
        if found:
            return max(found, key=lambda obj: len(os.path.commonprefix([obj.__name__, klass.__name__])))
    return None
