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
import sys
from functools import cache
from typing import Any

import torch
from torch import nn

from attnlab.errors import UserError
from attnlab.modules import hf_capture, hf_init, hf_inputs, hf_lineage, hf_record, hf_small, hf_stage
from attnlab.modules.configs import CONFIG_SPELLINGS, ConfigConstructor, config_class
from attnlab.modules.families import GENERIC, Family, family, family_of, spellings
from attnlab.modules.families.adapter import BY_SIZE, CONFIG_AND_LAYER
from attnlab.modules.hf_build import model_arguments
from attnlab.modules.hf_find import ChannelsFirst, Found, NotFound, find
from attnlab.modules.hf_lineage import missing_packages as missing_packages  # re-exported: built.py reads it here
from attnlab.modules.hf_lineage import transformers_class as transformers_class  # re-exported: callers read it here
from attnlab.modules.hf_stage import UNKNOWN as _UNKNOWN
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
    except ChannelsFirst as exc:  # an attention attnlab cannot run, named: not one it failed to find
        raise HFError(f"variant=hf:{model_type}: {exc}") from None
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


def _built(module_cls: type[nn.Module], args: list[Any], kwargs: dict[str, Any], tokens: int | None) -> nn.Module:
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
        raise window from None


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
        if getattr(config, "rope_parameters", None) == {} and hasattr(config, "default_theta"):
            _default_rope(config)
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
        module = builder.build(sizes, keys, private)
        if not hasattr(module, "config"):  # MPT's keeps none: held so it is called as its model calls it
            module.config = self.config({**sizes, **{k: v for k, v in keys.items() if k in CONFIG_SPELLINGS}},
                                        {k: v for k, v in keys.items() if k not in CONFIG_SPELLINGS}, private)
        return hf_init.initialised(module)  # with its config held: XLNet's keeps none, and its model's init reads it

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


def provided(cls: Any) -> tuple[str, ...]:
    """The required forward parameters a Hugging Face class's model call provides beside attnlab's own."""
    return (*PROVIDED, *hf_inputs.provided(cls), *hf_record.provided(cls))


def declared_window(module: nn.Module) -> int | None:
    """The sliding window the module (Gemma's per layer) or else its config (Mistral's) declares."""
    if hasattr(module, "sliding_window"):  # a plain attribute: nn.Module's __getattr__ types only its tensors and modules
        own: int | None = getattr(module, "sliding_window", None)
        return own
    config: Any = module.config  # a transformers config: its attributes are its model type's
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
    scale = hf_lineage.library_scale(module, origin, _fresh)
    if scale is None and origin is not None and hf_lineage.names_no_scale(origin):
        return 1.0, f"{origin.__name__} applies no scale to its scores (its code names none)"
    return scale


def _default_rope(config: Any) -> None:
    """An empty `rope_parameters` (CohereCompass's default, which its own rotary class cannot read)
    filled with transformers' documented default: the default rotary at `config.default_theta`,
    one per layer type where the config keys them so."""
    rope = {"rope_type": "default", "rope_theta": config.default_theta}
    types = getattr(config, "layer_types", None)
    config.rope_parameters = {kind: dict(rope) for kind in dict.fromkeys(types)} if types else rope


# (class, config as JSON, layer) -> its meta build: a notebook's repeated runs (and every layer of a
# model whose layers are alike) read one build's attributes instead of building the class again
_FRESH: dict[tuple[type, str, int], nn.Module] = {}


def _fresh(module_cls: type[nn.Module], config: Any, layer: int) -> nn.Module:
    """`module_cls` built from `config` for its Python attributes alone (declared_scale reads its
    `scaling`): on the meta device, where no weight is drawn (drawing a real layer's weights was most of
    declared_scale's cost); for real where the meta build fails (a constructor that reads a tensor's value).
    Kept by its config's full JSON (the same config read from the same folder again builds nothing); a
    config that has none is built every time."""
    try:
        key = (module_cls, config.to_json_string(use_diff=False), layer)
    except Exception:  # noqa: BLE001 - no JSON of it (not a transformers config): nothing to key it by
        key = None
    if key is not None and key in _FRESH:
        return _FRESH[key]
    try:
        with torch.device("meta"):
            fresh = build_attention(module_cls, config, layer=layer)
    except Exception:  # noqa: BLE001 - whatever the meta build trips on, the real build decides
        return build_attention(module_cls, config, layer=layer)
    if key is not None:
        if len(_FRESH) >= 256:  # a survey of many types in one process: bounded
            _FRESH.clear()
        _FRESH[key] = fresh
    return fresh
