"""Variant registry: the variants discovery found, by name, and how to build them.

Modelled on timm's `register_model` / `create_model` / `list_models`. Four sources, in order:
the built-ins shipped in `attnlab.plugins` (one folder per group: variants, modern,
implementations, mistakes), `./plugins` in the working folder, every folder on
`ATTNLAB_PLUGIN_PATH`, and installed distributions' entry points in the group `attnlab.variants`
(see discovery). A variant of yours named like a built-in takes its place (one warning line;
`builtin:NAME` reaches the built-in); two of yours with one name are an error when it is used.
Every variant has tags: its group first, then the ones its plugin declares;
`list_variants(filter, tag=...)` selects by them.

Building a variant: `constructor_kwargs` fills its constructor by parameter name from the
top-level config keys (d_in, d_out, context_length, dropout, num_heads, num_kv_heads, qkv_bias)
and `variant.params`; `auto_reference` picks the built-in reference that matches how a module
is declared.
"""

from __future__ import annotations

import difflib
import fnmatch
import inspect
from dataclasses import dataclass, field, replace
from functools import cache, lru_cache
from typing import Any

from torch import nn

from attnlab.errors import UserError
from attnlab.modules import hf, hf_call, session
from attnlab.modules.arguments import check_forward, unmasked_by_default
from attnlab.modules.configs import ConfigConstructor, module_class
from attnlab.modules.describe import same_file
from attnlab.modules.discovery import declaration, find_plugins, plugin_fingerprint
from attnlab.modules.families import spellings
from attnlab.modules.roles import declared_count, parameter_role
from attnlab.modules.variant_spec import BUILTIN, VariantSpec, constructor_parameters, constructor_signature
from attnlab.plugin_folders import USER_GROUP, builtin_groups, plugin_dirs
from attnlab.schema import BOOK_TOKENS, DEFAULTS


class VariantError(UserError):
    """A user-facing problem with a variant name: unknown, or defined twice."""


@dataclass(eq=False)  # hashed by identity: the session's view is cached per files' registry
class Registry:
    specs: dict[str, VariantSpec] = field(default_factory=dict)
    duplicates: dict[str, list[str]] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    fingerprint: str = ""  # the plugin files' contents when they were read (discovery.plugin_fingerprint)
    shadowed: dict[str, VariantSpec] = field(default_factory=dict)  # built-ins a variant of yours of one name hides

    def add(self, spec: VariantSpec) -> None:
        """A variant of yours wins over a built-in of its name (a built-in added by a release never
        breaks your folder: `builtin:NAME` reaches it); two of yours, or two built-ins, are a duplicate."""
        known = self.specs.get(spec.name)
        if known is not None and same_file(known.source, spec.source):
            return  # the same plugin file seen twice (an installed copy and ./plugins of a clone)
        if spec.builtin and (spec.name in self.duplicates or (known is not None and not known.builtin)):
            self.shadowed[spec.name] = spec
        elif known is not None and known.builtin and not spec.builtin:
            self.shadowed[spec.name], self.specs[spec.name] = known, spec
        elif spec.name in self.duplicates:
            self.duplicates[spec.name].append(spec.source)
        elif spec.name in self.specs:
            self.duplicates[spec.name] = [self.specs.pop(spec.name).source, spec.source]
        else:
            self.specs[spec.name] = spec

    def shadowing(self, name: str) -> str:
        """The one warning line of a variant of yours that hides the built-in `name`."""
        return (f"variant '{name}' is yours ({self.specs[name].source}) and runs in place of the built-in "
                f"({self.shadowed[name].source}); variant={BUILTIN}{name} runs the built-in")

    def names(self) -> list[str]:
        return sorted([*self.specs, *self.duplicates])

    def tags(self) -> list[str]:
        """Every group (empty or not) and every tag a plugin declares."""
        return sorted({*builtin_groups(), USER_GROUP, *(tag for spec in self.specs.values() for tag in spec.tags)})

    def select(self, filter: str = "", tag: str | None = None) -> list[str]:
        """Names matching `filter` (a shell pattern, e.g. "impl_*"; empty: all) that carry `tag`."""
        if tag is not None and tag not in self.tags():
            close = difflib.get_close_matches(tag, self.tags(), n=1)
            hint = f"did you mean '{close[0]}'? " if close else ""
            raise VariantError(f"unknown tag '{tag}'; {hint}tags: {', '.join(self.tags())}")
        names = self.names() if tag is None else sorted(n for n, s in self.specs.items() if tag in s.tags)
        return [name for name in names if not filter or fnmatch.fnmatchcase(name, filter)]

    def get(self, name: str) -> VariantSpec:
        if name.startswith(hf.PREFIX):
            return _hf_spec(name)
        if name.startswith(BUILTIN):
            return self.builtin(name.removeprefix(BUILTIN))
        if name in self.duplicates:
            sources = " and ".join(self.duplicates[name])
            raise VariantError(f"variant '{name}' is defined twice, in {sources}; rename one of them")
        if name not in self.specs:
            close = difflib.get_close_matches(name, self.names(), n=1)
            hint = f"did you mean '{close[0]}'? " if close else ""
            raise VariantError(f"unknown variant '{name}'; {hint}available: {', '.join(self.names())}")
        return self.specs[name]

    def builtin(self, name: str) -> VariantSpec:
        """attnlab's own variant `name`, shadowed by one of yours or not, as `builtin:NAME`."""
        spec = self.shadowed.get(name) or self.specs.get(name)
        if spec is None or not spec.builtin:
            known = sorted(n for n, s in [*self.specs.items(), *self.shadowed.items()] if s.builtin)
            close = difflib.get_close_matches(name, known, n=1)
            hint = f"did you mean '{BUILTIN}{close[0]}'? " if close else ""
            raise VariantError(f"unknown built-in variant '{BUILTIN}{name}'; {hint}built-ins: {', '.join(known)}")
        return replace(spec, name=f"{BUILTIN}{name}")


@cache
def _hf_spec(name: str) -> VariantSpec:
    """`hf:MODEL_TYPE`: a spelling with no file, so not a member of the variant group."""
    constructor = hf.hf_constructor(name)
    note = hf.tower_note(name.removeprefix(hf.PREFIX))  # a composite's: which tower runs, which others it holds
    description = f"Hugging Face {constructor.__name__} built from {constructor.config_cls.__name__}" + (
        f" ({note})" if note else "")
    return VariantSpec(name, constructor, description, {}, f"transformers ({constructor.module_cls.__module__})")


def _from_files() -> Registry:
    """The plugin files' variants, read once per set of plugin folders: `./plugins` is the working
    folder's, so a notebook (or a test) that changes folder sees that folder's plugins."""
    return _read_files(tuple(str(folder.resolve()) for folder in plugin_dirs()))


@lru_cache(maxsize=4)
def _read_files(folders: tuple[str, ...]) -> Registry:  # folders: the cache key, find_plugins reads them
    found = find_plugins()
    registry = Registry(warnings=found.warnings, fingerprint=found.fingerprint)
    for declared in found.declarations:
        try:
            spec = _spec(declared)  # Cls(config), nanoGPT's
        except Exception as exc:  # noqa: BLE001 - one declaration that cannot be read never takes the folder down
            registry.warnings.append(f"plugin {declared.source}: {declared.cls.__name__} skipped, its constructor "
                                     f"could not be read ({type(exc).__name__}: {' '.join(str(exc).split())})"[:200])
            continue
        registry.add(spec)
    registry.warnings += [registry.shadowing(name) for name in registry.shadowed if name in registry.specs]
    return registry


def _spec(declared: VariantSpec) -> VariantSpec:
    built = hf.config_constructor(module_class(declared.cls), declared.name) or declared.cls  # Cls(config), nanoGPT's
    return replace(declared, cls=built)


@lru_cache(maxsize=1)
def _with_session(files: Registry, version: int) -> Registry:
    """The files' variants and this session's (a notebook's classes and instances), which win."""
    if not version:
        return files
    registry = Registry(dict(files.specs), dict(files.duplicates), list(files.warnings), files.fingerprint,
                        dict(files.shadowed))
    for entry in session.variants():
        mark = {**entry.mark, "description": entry.mark.get("description") or f"{entry.cls.__name__} ({entry.origin})"}
        declared = declaration(entry.cls, entry.name, mark, entry.origin, USER_GROUP)
        registry.duplicates.pop(entry.name, None)
        known = registry.specs.get(entry.name)
        if known is not None and entry.name in registry.shadowed:  # a file of yours had the built-in's place
            registry.warnings.remove(registry.shadowing(entry.name))
        elif known is not None and known.builtin:
            registry.shadowed[entry.name] = known
        registry.specs[entry.name] = _spec(declared)
        if entry.name in registry.shadowed:
            registry.warnings.append(registry.shadowing(entry.name))
    return registry


def discover() -> Registry:
    """Every variant: the plugin files' (read once; `refresh` reads them again when one changed)
    and this session's."""
    return _with_session(_from_files(), session.version())


def _clear() -> None:
    _read_files.cache_clear()
    _with_session.cache_clear()


discover.cache_clear = _clear  # type: ignore[attr-defined]  # as when discover was an lru_cache


def refresh() -> None:
    """Read the plugin files again if any was added, removed or edited since they were read (by
    content, not by time): a notebook's next run sees them, with no kernel restart."""
    if _from_files().fingerprint != plugin_fingerprint():
        _clear()


def list_variants(filter: str = "", tag: str | None = None) -> list[str]:
    """The variants' names, sorted, as timm's `list_models`: `filter` a shell pattern ("mha_*"),
    `tag` a group (variants, modern, implementations, mistakes, yours) or a tag a plugin declares
    with `@attnlab.variant(tags=...)`. An unknown tag is an error naming the known ones."""
    return discover().select(filter, tag)


def get_variant(name: str) -> VariantSpec:
    return discover().get(name)


# Top-level config keys a constructor may take by name, and the other spellings constructors
# use for them (Hugging Face, nanoGPT, the source's later chapters).
CONSTRUCTOR_KEYS = ("d_in", "d_out", "context_length", "dropout", "num_heads", "num_kv_heads", "qkv_bias",
                    "attn_implementation")
# One table, the model families' (x-transformers' and diffusers' heads/kv_heads among them).
SPELLINGS = {key: spellings(key) for key in ("num_heads", "num_kv_heads")}
# A constructor's head size (x-transformers' and diffusers' dim_head, T5's d_kv): d_out / num_heads, by
# name; it and a second input's width never take d_out positionally
HEAD_DIMS = spellings("head_dim")
_NOT_D_OUT = frozenset({*HEAD_DIMS, "cross_attention_dim", "context_dim", "dim_context", "kdim", "vdim"})
_OUT_DIMS = ("out_dim", "dim_out")
# The schema's defaults; context_length, null there (n_tokens), is the book's six tokens here:
# create_variant builds a module without inputs.
DEFAULT_VALUES = {**{key: DEFAULTS[key] for key in ("dropout", "num_heads", "num_kv_heads", "qkv_bias",
                                                    "attn_implementation")},
                  "context_length": BOOK_TOKENS}
_TOP_LEVEL = {spelling: key for key in CONSTRUCTOR_KEYS for spelling in SPELLINGS.get(key, (key,))}
_POSITIONAL = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)


class ConstructorError(UserError):
    """A variant's constructor cannot be filled from the config: a wrong or missing argument."""


def constructor_kwargs(spec: VariantSpec, values: dict[str, Any], params: dict[str, Any]) -> tuple[list[Any], dict[str, Any]]:
    """(args, kwargs) that build `spec.cls`: `spec.cls(*args, **kwargs)`.

    `values` holds the top-level keys (CONSTRUCTOR_KEYS; others are ignored); context_length
    None means values["n_tokens"]; num_kv_heads None is not passed (a module's own default: num_heads, or a GQA module's grouping). d_in and d_out go
    positionally into the constructor's first two parameters, as `Cls(d_in, d_out)` always did,
    unless those parameters are named after another key (nn.MultiheadAttention's
    `(embed_dim, num_heads)` gets d_in only); every other key goes by name, under the
    constructor's own spelling, only to a constructor that names it (never into **kwargs,
    where it could reach code that does not expect it). `params` (variant.params) is merged over
    the spec's default params and passed by name.
    """
    values = _resolved(values)
    parameters = constructor_parameters(spec)
    named = {p.name: p for p in parameters if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)}
    takes_any = any(p.kind == p.VAR_KEYWORD for p in parameters)
    merged = {**spec.params, **params}
    for key, value in merged.items():
        if key in _TOP_LEVEL:
            top = _TOP_LEVEL[key]
            what = "a top-level key" if top == key else f"the top-level key {top}"
            where = "" if key in params else f" (a default param of variant '{spec.name}')"
            raise ConstructorError(f"variant.params.{key}{where}: {key} is {what}; use {top}={_show(value)}")
        if key not in named and not takes_any:
            close = difflib.get_close_matches(key, list(named), n=1, cutoff=0.5)
            hint = f"did you mean '{close[0]}'? " if close else ""
            raise ConstructorError(
                f"variant.params.{key}: variant '{spec.name}' takes no parameter '{key}'; "
                f"{hint}its constructor is {spec.cls.__name__}{constructor_signature(spec)}"
            )
    args: list[Any] = []
    slots = [p for p in parameters if p.kind in _POSITIONAL or p.kind == p.VAR_POSITIONAL]
    for key, slot in zip(("d_in", "d_out"), slots):
        if slot.kind != slot.VAR_POSITIONAL and (_TOP_LEVEL.get(slot.name, key) != key or slot.name in merged
                                                 or slot.name in _NOT_D_OUT):
            break  # named after another key, or set by variant.params: filled by name instead
        args.append(values[key])
        if slot.kind == slot.VAR_POSITIONAL:  # (*args): both go positionally
            args += [values["d_out"]] if key == "d_in" else []
            break
    filled = {p.name for p in slots[: len(args)] if p.kind != p.VAR_POSITIONAL}
    kwargs = {}
    for name in named:
        if name not in filled and name in _TOP_LEVEL and _TOP_LEVEL[name] in values:
            kwargs[name] = values[_TOP_LEVEL[name]]
    out_name = next((n for n in _OUT_DIMS if n in named), None)
    if out_name and len(args) < 2 and "d_out" in values:
        kwargs[out_name] = values["d_out"]  # d_out went nowhere positionally: diffusers' out_dim
    heads = next((kwargs[n] for n in SPELLINGS["num_heads"] if isinstance(kwargs.get(n), int)), None)
    for name in named:
        if name in HEAD_DIMS and name not in filled and heads and "d_out" in values:
            kwargs[name] = values["d_out"] // heads
    kwargs.update(merged)
    for p in named.values():
        if p.default is p.empty and _TOP_LEVEL.get(p.name) == "num_kv_heads" and p.name not in kwargs:
            kwargs[p.name] = values.get("num_heads")  # a required kv-head count left unset: one per head
        if p.default is p.empty and p.name not in filled and p.name not in kwargs:
            raise ConstructorError(
                f"variant '{spec.name}' needs the constructor argument '{p.name}': set variant.params.{p.name}=VALUE"
            )
    extra = hf.provided(module_class(spec.cls)) if isinstance(spec.cls, hf.HFConstructor) else None
    check_forward(module_class(spec.cls), spec.name, extra)  # a forward nobody can call: refused before any work
    return args, kwargs


def check_head_split(spec: VariantSpec, args: list[Any], kwargs: dict[str, Any], params: dict[str, Any]) -> None:
    """A constructor given d_out and num_heads (`constructor_kwargs`) splits d_out into heads: an
    uneven split is refused before any work, not by the module's own assert in the middle of the
    job. A head width given in the params decides the split itself."""
    heads = next((kwargs[n] for n in SPELLINGS["num_heads"] if isinstance(kwargs.get(n), int)), None)
    d_out = args[1] if len(args) >= 2 else next((kwargs[n] for n in _OUT_DIMS if n in kwargs), None)
    if any(name in {**spec.params, **params} for name in HEAD_DIMS) or not heads or not isinstance(d_out, int):
        return
    if d_out % heads:
        raise ConstructorError(f"d_out={d_out}: must be a multiple of num_heads={heads} "
                               f"(variant '{spec.name}' splits d_out into num_heads heads)")


def _resolved(values: dict[str, Any]) -> dict[str, Any]:
    out = {key: values[key] for key in CONSTRUCTOR_KEYS if key in values}
    if out.get("context_length") is None and values.get("n_tokens") is not None:
        out["context_length"] = values["n_tokens"]
    return {key: value for key, value in out.items() if value is not None}


def _show(value: Any) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


def auto_reference(spec: VariantSpec, module: nn.Module, batched: bool) -> str:
    """The reference `reference=auto` compares a variant against (`_chosen_reference`), spelled
    `builtin:NAME` where a variant of yours has its name: a plugin of yours called `reference` never
    becomes the reference of the built-ins, nor of your other variants."""
    chosen = _chosen_reference(spec, module, batched)
    if spec.reference and not spec.builtin:
        return chosen  # a plugin of yours declared it: the name as you spelled it
    return f"{BUILTIN}{chosen}" if chosen in discover().shadowed else chosen


def _chosen_reference(spec: VariantSpec, module: nn.Module, batched: bool) -> str:
    """The built-in reference `reference=auto` compares a variant against, chosen from how it is
    declared: its plugin's declaration, its constructor's parameters and the submodules and
    parameters of `module` (the variant built with its constructor arguments), never from what
    its forward does, so a module that forgot its mask or never calls its out_proj is compared
    with a reference that has them.

    A declared reference wins; a 2-D module (`batched` False, from the probe call) gets
    `reference` (SelfAttention_v1); a batched one without a head count among its constructor's
    parameters `causal_attention`; an nn.ModuleList of per-head modules without an output
    projection `mha_wrapper`; anything else `multi_head_attention`.
    """
    if spec.reference:
        return spec.reference
    if not batched:
        return "reference"
    if not any(p.name in SPELLINGS["num_heads"] for p in constructor_parameters(spec)):
        return "causal_attention"
    heads = [name for name, child in module.named_modules() if isinstance(child, nn.ModuleList) and _per_head(child)]
    outside = [
        name for name, _ in module.named_parameters()
        if not any(name.startswith(f"{head}.") for head in heads if head)
    ]
    has_projection = any(parameter_role(name) == "out" for name in outside)
    if heads and not has_projection:
        return "mha_wrapper"
    if not _causal(module):  # declared an encoder's: every query sees every key
        return "bidirectional_attention" if has_projection else "bidirectional_heads"
    if isinstance(spec.cls, ConfigConstructor):
        return _declared_kind(module, has_projection)
    return "multi_head_attention"


def _causal(module: nn.Module) -> bool:
    """Whether its model masks the future: a Hugging Face module's family row says, else what the
    module declares (`is_causal`, x-transformers' `causal`), else its forward: a mask it takes only
    optionally is left out by attnlab, so it runs unmasked (nn.MultiheadAttention's attn_mask)."""
    if hf.is_hf_module(module):
        return hf_call.mask_kind(module) != "bidirectional"
    for name in ("is_causal", "causal"):
        if isinstance(flag := getattr(module, name, None), bool):
            return flag
    return not unmasked_by_default(type(module))


def _declared_kind(module: nn.Module, has_projection: bool) -> str:
    """A config-built class (Hugging Face's, nanoGPT's): causal multi-head attention with its
    config's key/value heads, so what its config declares beyond that (RoPE, a window, a scale) is
    named by the recognisers and a mistake in its code is still found."""
    if not has_projection:
        return "causal_heads"
    config = getattr(module, "config", None)
    own = getattr(config, "model_type", "")
    heads = next((getattr(config, s) for s in spellings("num_heads", own) if isinstance(getattr(config, s, None), int)),
                 None)
    # the count the module keeps (Falcon's multi-query one), else its config's
    kv_heads = declared_count(module, "num_kv_heads") or next(
        (getattr(config, s) for s in spellings("num_kv_heads", own) if isinstance(getattr(config, s, None), int)), heads)
    return "gqa" if heads and kv_heads < heads else "multi_head_attention"


def _per_head(modules: nn.ModuleList) -> bool:
    """A ModuleList whose items are one module class holding parameters: attention heads."""
    return len(modules) > 0 and len({type(m) for m in modules}) == 1 and any(True for _ in modules[0].parameters())
