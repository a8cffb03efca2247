"""Constructors that take one config object: nanoGPT's `CausalSelfAttention(config)` with its
`GPTConfig`, a Hugging Face attention class with its `PretrainedConfig` and `layer_idx`.

Such a class is built through a `ConfigConstructor`: a callable with the signature attnlab's
constructor filling reads (the top-level keys the config has a spelling for, by their attnlab
names), which fills the config object under its own spellings (`n_embd`/`hidden_size`,
`n_head`/`num_attention_heads`, ...) and builds the class from it. `variant.params.NAME` sets any
other attribute of the config (`variant.params.sliding_window=3`) or a constructor argument
beside the config (`layer_idx`); a name that is neither is a one-line error, because Hugging Face
configs accept unknown attributes silently.
"""

from __future__ import annotations

import ast
import copy
import dataclasses
import difflib
import inspect
import re
import sys
import textwrap
from functools import cache
from typing import Any

from torch import nn

from attnlab.errors import UserError
from attnlab.modules.families import spellings

# attnlab's top-level key -> the spellings config classes use for it, most common first: one table,
# the model families' (families.GENERIC first, then each row's own)
CONFIG_SPELLINGS: dict[str, tuple[str, ...]] = {
    key: spellings(key) for key in ("d_in", "num_heads", "num_kv_heads", "dropout", "qkv_bias", "context_length")}
_CONFIG_NAMES = ("config", "cfg", "configuration", "args", "params")
_SIZE_KEYS = ("d_in", "d_out", "num_heads")


class ConfigError(UserError):
    """A config attribute attnlab cannot fill, or a name the config class does not have."""


_EVERY_SPELLING = ("d_in", "num_heads")
_PREFIXED = ("num_heads", "num_kv_heads", "head_dim")  # also filled under a tower's prefix (`_prefixed`)
_ATTENTION_WORDS = ("attention", "attn", "key_value", "kv")  # in the name or its spelling: an attention's heads


def config_class(cls: type) -> type | None:
    """The config class `cls` is built from: its constructor's only required parameter (beside a
    layer_idx) is named like a config (or annotated with a class), and its type is that annotation,
    else the one class named `...Config` beside `cls` in its own file. A constructor that takes only
    `(*args, **kwargs)` (a subclass handing them on, or a class another library wraps, as transformers
    5.25 wraps its attention classes) names nothing: the config beside it, else its base's. None for
    any other constructor."""
    try:
        parameters = list(inspect.signature(cls).parameters.values())
    except (TypeError, ValueError):
        return None
    if parameters and all(p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD) for p in parameters):
        return _beside(cls) or _base_config(cls)
    required = [p for p in parameters if p.default is p.empty and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
                and p.name != "layer_idx"]  # Hugging Face's (config, layer_idx): layer_idx is 0 unless set
    if len(required) != 1:
        return None
    (first,) = required
    annotation = _annotation(cls, first)
    if inspect.isclass(annotation) and annotation is not first.empty:
        # a class holding attributes (a dataclass, a PretrainedConfig); never `int` (timm's `dim: int`) or a module
        return None if issubclass(annotation, nn.Module) or annotation.__module__ == "builtins" else annotation
    if first.name not in _CONFIG_NAMES:
        return None
    return _beside(cls) or _base_config(cls)


def _beside(cls: type) -> type | None:
    """The one `...Config` class defined (nanoGPT's GPTConfig), else imported (GPT2Attention's
    GPT2Config), in the file of `cls`."""
    module = sys.modules.get(cls.__module__)
    found = [obj for name, obj in vars(module).items() if inspect.isclass(obj) and name.endswith("Config")
             and not name.lower().startswith("pretrained")] if module else []
    own = [obj for obj in found if obj.__module__ == cls.__module__]
    return (own or found)[0] if len(own or found) == 1 else None


def _base_config(cls: type) -> type | None:
    """A subclass of LlamaAttention: its base's config."""
    base = next((b for b in cls.__mro__[1:] if issubclass(b, nn.Module) and b is not nn.Module), None)
    return config_class(base) if base is not None else None


def _annotation(cls: type[object], parameter: inspect.Parameter) -> Any:
    annotation = parameter.annotation
    if isinstance(annotation, str):  # `from __future__ import annotations`: resolve in the class's module
        try:
            annotation = inspect.get_annotations(cls.__init__, eval_str=True).get(parameter.name)
        except Exception:  # noqa: BLE001 - an annotation that does not resolve says nothing
            return None
    return annotation


def config_attributes(config_cls: type, module_cls: type | None = None) -> dict[str, Any]:
    """Every attribute a config class takes, with its default (a dataclass's fields, a
    PretrainedConfig's defaults as an instance built with none given). A plain class that needs
    arguments (minGPT's `GPTConfig(vocab_size, block_size, **kwargs)`) takes its constructor's
    parameters, its class attributes and what `module_cls` reads off the config it is given."""
    if dataclasses.is_dataclass(config_cls):
        return {f.name: _field_default(f) for f in dataclasses.fields(config_cls)}
    try:
        instance = config_cls()
    except Exception:  # noqa: BLE001 - a config that needs arguments: its constructor's parameters
        parameters = inspect.signature(config_cls).parameters.values()
        taken = {p.name: None if p.default is p.empty else p.default for p in parameters
                 if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)}
        held = {k: v for k, v in vars(config_cls).items() if not k.startswith("_") and not callable(v)}
        return {**dict.fromkeys(_config_reads(module_cls)), **held, **taken}
    held = getattr(instance, "__dict__", {})  # a value without attributes holds none to fill
    return {k: v for k, v in held.items() if not k.startswith("_")}


def _config_reads(module_cls: type[object] | None) -> list[str]:
    """The attributes `module_cls.__init__` reads off its config parameter (`config.n_embd`)."""
    if module_cls is None:
        return []
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(module_cls.__init__)))
    except (TypeError, OSError, SyntaxError):
        return []
    function = tree.body[0]
    if not isinstance(function, ast.FunctionDef) or len(function.args.args) < 2:
        return []
    name = function.args.args[1].arg
    return list(dict.fromkeys(node.attr for node in ast.walk(function) if isinstance(node, ast.Attribute)
                              and isinstance(node.value, ast.Name) and node.value.id == name))


def _prefixed(attributes: dict[str, Any], own: str, reads: list[str]) -> dict[str, list[str]]:
    """The head counts and sizes a config holds under a tower's or a block's name, `<prefix>_<spelling>`
    (Moonshine's decoder_num_attention_heads, PatchTSMixer's self_attn_heads, Idefics2's perceiver
    resampler_n_heads and resampler_head_dim), by key: the model's code builds its attention from
    whichever it reads, so all are filled alike. An attribute goes to the key of the longest spelling
    it ends with (encoder_num_key_value_heads is num_kv_heads', not num_heads'); a count when its name
    says attention or the class reads it (`reads`), never a model's prediction heads; a head size
    beside such a count, or the values' own where it is the only other one (MiMo-V2-Flash's v_head_dim)."""
    endings = sorted(((s, key) for key in _PREFIXED for s in spellings(key, own)), key=lambda e: -len(e[0]))
    every = {s for key in _PREFIXED for s in spellings(key, own)}
    found: dict[str, list[str]] = {key: [] for key in _PREFIXED}
    sizes: dict[str, str] = {}  # a head size's name -> its prefix
    heads: set[str] = set()  # the prefixes of the counts taken
    for name, default in attributes.items():
        counts = (isinstance(default, int) and not isinstance(default, bool)) or (
            isinstance(default, (list, tuple)) and bool(default) and all(isinstance(v, int) for v in default))
        if name in every or not counts:
            continue
        s, key = next(((s, key) for s, key in endings if name.endswith("_" + s)), ("", None))
        prefix = name[:-len(s) - 1]
        if key == "num_heads" and any(w in name for w in ("key_value", "kv_")):  # Sapiens2's num_key_value_attention_heads
            key = "num_kv_heads"
        if key == "head_dim":
            sizes[name] = prefix
        elif key is not None and (any(w in s or w in name for w in _ATTENTION_WORDS) or name in reads):
            found[key].append(name)
            heads.add(prefix)
    found["head_dim"] = [name for name, prefix in sizes.items() if prefix in heads]
    # the values' own head size beside the plain one (MiMo-V2-Flash's v_head_dim); MLA's family of them
    # (qk_nope_head_dim, qk_rope_head_dim, v_head_dim) is the class's own design, read as latent attention
    if [prefix for prefix in sizes.values() if prefix not in heads] == ["v"]:
        found["head_dim"].append(next(name for name, prefix in sizes.items() if prefix == "v"))
    return found


_HIDDEN_WIDTH = re.compile(r"^(encoder|decoder)_(hidden_dim|hidden_size|d_model|embed_dim)$")


def _tied_widths(attributes: dict[str, Any], d_in: str | None) -> list[str]:
    """An encoder's or decoder's own hidden width whose default is the model's (RT-DETR's
    encoder_hidden_dim of 256 beside its d_model of 256), or each of them where the model names no
    width of its own (OmDet-Turbo's encoder_hidden_dim and decoder_hidden_dim): the model passes its
    hidden states from one to the other, and its code builds the attention class from either, so
    each is attnlab's d_in."""
    width = attributes.get(d_in) if d_in else None
    if d_in and type(width) is not int:
        return []
    return [name for name, default in attributes.items() if name != d_in and type(default) is int
            and (width is None or default == width) and _HIDDEN_WIDTH.search(name)]


def prefixed_sizes(config: Any) -> dict[str, list[str]]:
    """The attributes of a config instance (a sub-config attnlab sizes as its model builds it) that
    hold a size under a tower's name, by attnlab's key: heads and head sizes (`_prefixed`), and the
    hidden widths tied to its own (`_tied_widths`) as "d_in"."""
    held = {k: v for k, v in vars(config).items() if not k.startswith("_")}
    own = getattr(config, "model_type", "")
    found = _prefixed(held, own, [])
    d_in = next((s for s in spellings("d_in", own) if type(held.get(s)) is int), None)
    return {**found, "d_in": _tied_widths(held, d_in)}


def _field_default(f: dataclasses.Field[Any]) -> Any:
    if f.default is not dataclasses.MISSING:
        return f.default
    return f.default_factory() if f.default_factory is not dataclasses.MISSING else None


class ConfigConstructor:
    """`module_cls` built from a `config_cls` filled from attnlab's keys; called as a constructor."""

    def __init__(self, module_cls: type[nn.Module], config_cls: type, name: str) -> None:
        self.module_cls, self.config_cls, self.name = module_cls, config_cls, name
        self.__name__ = module_cls.__name__
        self.__doc__ = module_cls.__doc__
        self.__module__ = module_cls.__module__
        self.attributes = config_attributes(config_cls, module_cls)
        own = getattr(config_cls, "model_type", "")  # a Hugging Face config's family: its spellings first
        # a name the config's attribute_map declares sets what the class reads under it (SeamlessM4T's
        # num_attention_heads is its decoder's heads, not the encoder_attention_heads it also has)
        named = {**self.attributes, **dict.fromkeys(getattr(config_cls, "attribute_map", None) or {})}
        self.spelled = {key: next((s for s in spellings(key, own) if s in named), None) for key in CONFIG_SPELLINGS}
        # the other spellings of a size the config holds too, filled alike: the class is built from
        # whichever its model's code reads
        self.also = {key: [s for s in spellings(key, own) if s in self.attributes and s != self.spelled[key]]
                     for key in _EVERY_SPELLING}
        self.prefixed = _prefixed(self.attributes, own, _config_reads(module_cls))
        d_in = self.spelled["d_in"]
        self.tied = _tied_widths(self.attributes, (getattr(config_cls, "attribute_map", None) or {}).get(d_in, d_in))
        # the head size's spelling (T5's d_kv, diffusers' dim_head), filled as d_out / num_heads
        self.head_dim = next((s for s in spellings("head_dim", own) if s in self.attributes), None)
        self.extra = self.constructor_parameters()

    def constructor_parameters(self) -> list[str]:
        """What the constructor takes beside the config (`variant.params` may set them): its own
        signature's parameters after the config, the contract of a plain `Cls(config)`."""
        return list(inspect.signature(self.module_cls).parameters)[1:]

    @property
    def __signature__(self) -> inspect.Signature:
        """What attnlab's constructor filling reads: the keys this config has a spelling for."""
        keys = ["d_in", "d_out", *[k for k in CONFIG_SPELLINGS if k != "d_in" and self.spelled[k]]]
        kind = inspect.Parameter.POSITIONAL_OR_KEYWORD
        params = [inspect.Parameter(k, kind) if k in _SIZE_KEYS else inspect.Parameter(k, kind, default=None)
                  for k in keys]
        if "num_heads" not in keys:
            params.append(inspect.Parameter("num_heads", kind, default=None))
        return inspect.Signature([*params, inspect.Parameter("params", inspect.Parameter.VAR_KEYWORD)])

    def describe(self) -> str:
        """`--help`'s signature: which config attribute each top-level key fills, and what else
        variant.params can set, e.g. "(config: GPTConfig(n_embd=d_in, n_head=num_heads, ...))"."""
        filled = [f"{s}={k}" for k, s in self.spelled.items() if s] + ([f"{self.head_dim}=d_out/num_heads"]
                                                                       if self.head_dim else [])
        extra = f" or {', '.join(self.extra)}" if self.extra else ""
        return (f"(config: {self.config_cls.__name__}({', '.join(filled)})); variant.params.NAME sets any other "
                f"{self.config_cls.__name__} attribute{extra}")

    def config(self, values: dict[str, Any], params: dict[str, Any], private: dict[str, Any] | None = None) -> Any:
        """The config object filled from the top-level keys and `params` (its own spellings), and
        `private` attributes set after (Hugging Face's `_attn_implementation`)."""
        self._check_sizes(values)
        filled: dict[str, Any] = {}
        for key, spelling in self.spelled.items():
            if spelling and values.get(key) is not None:
                filled[spelling] = self._per_stage(spelling, values[key])
        for key in _EVERY_SPELLING:  # the model's own code may read another (SeamlessM4T's encoder_attention_heads)
            for spelling in self.also[key]:
                if values.get(key) is not None:
                    filled[spelling] = self._per_stage(spelling, values[key])
        filled.update({name: values["d_in"] for name in self.tied if values.get("d_in") is not None})
        if heads := values.get("num_heads"):  # a tower's own heads (Moonshine's decoder_num_attention_heads)
            sized = {"num_heads": heads, "head_dim": values["d_out"] // heads,
                     "num_kv_heads": values.get("num_kv_heads") or heads}
            for key, names in self.prefixed.items():
                filled.update({name: self._per_stage(name, sized[key]) for name in names if name not in filled})
        if self.spelled["num_kv_heads"] and values.get("num_kv_heads") is None:
            filled[self.spelled["num_kv_heads"]] = values["num_heads"]  # attnlab's null: one per head
        if self.head_dim:
            filled[self.head_dim] = values["d_out"] // values["num_heads"]
        if isinstance(self.attributes.get("rotary_dim"), int) and "rotary_dim" not in params:
            # GPT-J's and CodeGen's default is for their own heads: no more than a head can turn
            filled["rotary_dim"] = min(self.attributes["rotary_dim"], values["d_out"] // values["num_heads"])
        for name, value in params.items():
            self._check_param(name)
            if name not in self.extra:
                filled[name] = value
        filled.update(private or {})
        return self._built(filled)

    def _per_stage(self, spelling: str, value: Any) -> Any:
        """A value where the config holds one per stage (Swin's num_heads [3, 6, 12, 24]): every stage's."""
        aliased = (getattr(self.config_cls, "attribute_map", None) or {}).get(spelling, spelling)  # Swin's num_heads
        default = self.attributes.get(spelling, self.attributes.get(aliased))
        if default is None:  # a field its config's __post_init__ fills (SAM 2's embed_dim_per_stage): as built
            default = getattr(_built_default(self.config_cls), spelling, None)
        return type(default)([value] * len(default)) if isinstance(default, (list, tuple)) and default else value

    def _built(self, filled: dict[str, Any]) -> Any:
        private = {k: filled.pop(k) for k in list(filled) if k.startswith("_")}
        try:
            try:
                config = self._made(filled)
            except TypeError:
                raise
            except Exception:  # noqa: BLE001 - a validator refusing a size beside one of its own: sized consistently
                config = self._consistent(filled)
        except Exception as exc:  # noqa: BLE001 - refused either way: the first refusal, in one line
            raise ConfigError(f"variant '{self.name}': {self.config_cls.__name__} refused the values: "
                              f"{' '.join(str(exc).split())}") from None
        for key, value in private.items():
            setattr(config, key, value)
        return config

    def _made(self, filled: dict[str, Any]) -> Any:
        return self.config_cls(**filled) if dataclasses.is_dataclass(self.config_cls) else self._set(filled)

    def _consistent(self, filled: dict[str, Any]) -> Any:
        """The config its own validator accepts (DAB-DETR's query_dim of 4, WavTokenizer's codebook_dim
        equal to its hidden_size): without the other spellings of a size (`also`), which keep the
        config's own value, else with every width of it (its sub-configs') equal to a size's default
        set to attnlab's value, as the config's own defaults tie them."""
        also = {s for spellings_ in self.also.values() for s in spellings_}
        own = {k: v for k, v in filled.items() if k not in also}
        context = self.spelled["context_length"] or ""
        default, given = self.attributes.get(context), own.get(context)
        # a context length (a capacity of positions) its validator ties to a size of its own (Granite Speech 5's
        # context_size <= max_position_embeddings): the config's own where larger, which the run's tokens fit in
        wider = type(default) is int and type(given) is int and default > given
        for tried in (own, {**own, context: default}) if wider else (own,):
            try:
                return self._made(tried)
            except TypeError:
                raise
            except Exception:  # noqa: BLE001 - a width tied to the size elsewhere: set alike
                pass
        config = self.config_cls()
        renamed = {old: value for key, value in filled.items() if type(old := getattr(config, key, None)) is int
                   and type(value) is int and old != value and key not in also}
        renamed = {**self._group_renamed(config, filled), **renamed}  # a size of its own first
        for holder in _with_subconfigs(config):
            for name, value in list(vars(holder).items()):
                if _WIDTH.search(name) and not name.startswith("_"):
                    setattr(holder, name, _renamed(value, renamed))
        for key, value in filled.items():
            setattr(config, key, value)
        if hasattr(config, "validate"):
            config.validate()
        return config

    def _group_renamed(self, config: Any, filled: dict[str, Any]) -> dict[int, int]:
        """The default's query heads per key/value head as attnlab's (Kolibri's index_num_heads, at most its
        48 / 4 = 12 query heads of a key head, becomes 4 / 4 = 1): a count tied to the grouping, shrunk alike."""
        heads, kv = self.spelled["num_heads"], self.spelled["num_kv_heads"]
        old = [getattr(config, name, None) if name else None for name in (heads, kv)]
        new = [filled.get(name) if name else None for name in (heads, kv)]
        counts = [v for v in (*old, *new) if type(v) is int and v > 0]
        if len(counts) < 4:
            return {}
        old_heads, old_kv, new_heads, new_kv = counts
        if old_heads % old_kv or new_heads % new_kv:
            return {}
        before, after = old_heads // old_kv, new_heads // new_kv
        return {before: after} if before != after else {}

    def _set(self, filled: dict[str, Any]) -> Any:
        try:
            return self.config_cls(**filled)
        except TypeError:  # a plain class whose constructor takes none of them: built with its own defaults, then set
            config = self.config_cls(**self._required(filled))
            for key, value in filled.items():
                setattr(config, key, value)
            return config

    def _required(self, filled: dict[str, Any]) -> dict[str, Any]:
        """The config constructor's parameters without a default, from `filled` where they are there,
        else None (minGPT's vocab_size, which an attention layer never reads)."""
        parameters = inspect.signature(self.config_cls).parameters.values()
        return {p.name: filled.get(p.name) for p in parameters
                if p.default is p.empty and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}

    def _check_sizes(self, values: dict[str, Any]) -> None:
        d_in, d_out, heads = values["d_in"], values["d_out"], values.get("num_heads") or 1
        if d_out != d_in or d_out % heads:
            raise ConfigError(
                f"variant '{self.name}': {self.module_cls.__name__}'s output is {self.spelled['d_in'] or 'd_in'} wide, "
                f"so d_out must equal d_in and divide by num_heads (got d_in={d_in}, d_out={d_out}, num_heads={heads}); "
                f"e.g. inputs=random inputs.d_in=64 d_out=64 num_heads=4")

    def _check_param(self, name: str) -> None:
        top = next((key for key, spelling in self.spelled.items() if spelling == name), None)
        if top is not None or name == self.head_dim:
            use = {"d_in": "inputs.d_in", "head_dim": "d_out (head_dim = d_out / num_heads)"}.get(top or "head_dim", top)
            raise ConfigError(f"variant.params.{name}: {name} is filled from the top-level key; set {use} instead")
        if name not in self.attributes and name not in self.extra:
            close = difflib.get_close_matches(name, [*self.attributes, *self.extra], n=1)
            hint = f"did you mean '{close[0]}'? " if close else ""
            raise ConfigError(f"variant.params.{name}: {self.config_cls.__name__} has no attribute '{name}'; {hint}"
                              f"see python -m attnlab --help")

    def __call__(self, d_in: int, d_out: int, num_heads: int | None = None, **keys: Any) -> nn.Module:
        return self.build({"d_in": d_in, "d_out": d_out, "num_heads": num_heads}, keys)

    def build(self, sizes: dict[str, Any], keys: dict[str, Any], private: dict[str, Any] | None = None) -> nn.Module:
        """The module from its config: `sizes` and the top-level `keys`, the rest of `keys` its params."""
        params = {k: v for k, v in keys.items() if k not in CONFIG_SPELLINGS}
        top = {k: v for k, v in keys.items() if k in CONFIG_SPELLINGS}
        config = self.config({**sizes, **top}, params, private)
        return self.construct(config, {k: v for k, v in params.items() if k in self.extra})

    def construct(self, config: Any, extra: dict[str, Any]) -> nn.Module:
        """`Cls(config, ...)`, with `extra` (variant.params) beside the config; a layer index is 0."""
        if "layer_idx" in self.extra:
            extra.setdefault("layer_idx", 0)
        return self.module_cls(config, **extra)


# what a variant is built with: its class, or that class built from a config (called alike)
Constructor = type[nn.Module] | ConfigConstructor


_WIDTH = re.compile(r"(dim|size|heads|features|channels)s?$")  # a width's name; never a depth, a vocabulary


@cache
def _built_default(config_cls: type) -> Any:
    """The config class built with its defaults; None where it needs arguments."""
    try:
        return config_cls()
    except Exception:  # noqa: BLE001 - a config that needs arguments holds no default to read
        return None


def _with_subconfigs(config: Any) -> list[Any]:
    held = [v for v in vars(config).values() if hasattr(v, "to_dict") and hasattr(v, "model_type")]
    return [config, *(s for v in held for s in _with_subconfigs(v))]


def tied(config: Any) -> Any | None:
    """A copy of a Hugging Face `config` with each width its class's defaults tie to a size attnlab
    set (SqueezeBERT's embedding_size, 768 as its hidden_size) set to attnlab's value, as `_consistent`
    sets them for a validator; None where no width is tied."""
    try:
        default = type(config)()
    except Exception:  # noqa: BLE001 - a config that needs arguments has no defaults to tie by
        return None
    own = getattr(config, "model_type", "")
    sizes = {s for key in _EVERY_SPELLING for s in spellings(key, own)}
    renamed = {old: new for s in sizes if type(old := getattr(default, s, None)) is int
               and type(new := getattr(config, s, None)) is int and old != new}
    small = copy.deepcopy(config)
    changed = False
    for holder, original in zip(_with_subconfigs(small), _with_subconfigs(default), strict=False):
        for name, value in list(vars(holder).items()):
            # a width left at its default (never one attnlab set) that equals a size's default
            if _WIDTH.search(name) and not name.startswith("_") and value == getattr(original, name, None) \
                    and (new := _tied_value(value, renamed)) != value:
                setattr(holder, name, new)
                changed = True
    return small if changed else None


def _tied_value(value: Any, renamed: dict[int, int]) -> Any:
    """`value` renamed (`_renamed`); widths that sum to a size's default (Reformer's axial_pos_embds_dim,
    64 + 192 = its hidden_size 256) scaled to sum to attnlab's."""
    if isinstance(value, (list, tuple)) and len(value) > 1 and all(type(v) is int for v in value) \
            and sum(value) in renamed:
        total = renamed[sum(value)]
        scaled = [v * total // sum(value) for v in value]
        scaled[-1] += total - sum(scaled)  # what rounding down left goes to the last
        if all(scaled):
            return type(value)(scaled)
    return _renamed(value, renamed)


def _renamed(value: Any, renamed: dict[int, int]) -> Any:
    """`value` with each int a size's default replaced by attnlab's (a list's elements alike)."""
    if type(value) is int:
        return renamed.get(value, value)
    if isinstance(value, (list, tuple)) and all(type(v) is int for v in value):
        return type(value)(renamed.get(v, v) for v in value)
    return value


def module_class(cls: Constructor) -> type[nn.Module]:
    """The nn.Module class a variant's constructor builds: a ConfigConstructor's wrapped class."""
    return cls.module_cls if isinstance(cls, ConfigConstructor) else cls
