"""Variant registry: discover attention variants as plugins, name them, build them.

Modelled on timm's `register_model` / `create_model` / `list_models`. Four sources, in order:
the built-ins shipped in `attnlab.plugins`, `./plugins` in the working folder, every folder on
`ATTNLAB_PLUGIN_PATH`, and installed distributions' entry points in the group
`attnlab.variants`. A file `NAME.py` defining one `nn.Module` subclass is the variant `NAME`
with no import of attnlab at all, so the source's class pasted verbatim just works; a file whose
classes build one another (the source's wrapper builds `CausalAttention` heads) is the variant
of its outermost class.

Building a variant: `constructor_kwargs` fills its constructor by parameter name from the
top-level config keys (d_in, d_out, context_length, dropout, num_heads, num_kv_heads, qkv_bias)
and `variant.params`; `auto_reference` picks the built-in reference that matches how a module
is declared.
"""

from __future__ import annotations

import difflib
import hashlib
import importlib.util
import inspect
import io
import os
import re
import sys
import textwrap
import tokenize
from dataclasses import dataclass, field
from functools import lru_cache
from importlib import metadata, resources
from pathlib import Path
from typing import Any, Callable, TypeVar

from torch import nn

from attnlab.errors import UserError
from attnlab.plugin_folders import plugin_dirs

ENTRY_POINT_GROUP = "attnlab.variants"
_MARK = "__attnlab_variants__"

ModuleClass = TypeVar("ModuleClass", bound=type)


@dataclass(frozen=True)
class VariantSpec:
    name: str
    cls: type[nn.Module]
    description: str
    params: dict[str, Any]
    source: str
    expected_finding: tuple[str, str] | None = None  # (code, stage) a bug-zoo variant must trigger
    reference: str | None = None  # the variant it is compared against, declared by the plugin; None: auto
    observable: dict[str, int] = field(default_factory=dict)  # the smallest size its change shows at: {"head_dim": 2}

    @property
    def signature(self) -> str:
        """The constructor's parameters, as `--help` lists them."""
        return constructor_signature(self)


class VariantError(UserError):
    """A user-facing problem with a variant name: unknown, or defined twice."""


def variant(
    name: str | None = None,
    *,
    description: str | None = None,
    params: dict[str, Any] | None = None,
    expected_finding: tuple[str, str] | None = None,
    reference: str | None = None,
    observable: dict[str, int] | None = None,
) -> Callable[[ModuleClass], ModuleClass]:
    """Name a variant explicitly; allows several variants in one file, default params and the
    reference it is compared against (`reference=auto` then chooses this one). `observable`: the
    smallest size at which its change can be seen (`n_tokens`, `head_dim`, `d_in`, `d_out`);
    below it a run says so in `not_checked` instead of diagnosing."""

    def mark(cls: ModuleClass) -> ModuleClass:
        marks = list(cls.__dict__.get(_MARK, ()))
        marks.append(
            dict(name=name, description=description, params=dict(params or {}),
                 expected_finding=expected_finding, reference=reference, observable=dict(observable or {}))
        )
        setattr(cls, _MARK, marks)
        return cls

    return mark


@dataclass
class Registry:
    specs: dict[str, VariantSpec] = field(default_factory=dict)
    duplicates: dict[str, list[str]] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    seen_texts: dict[str, str] = field(default_factory=dict, repr=False)  # docstring/comment -> first file

    def add(self, spec: VariantSpec) -> None:
        known = self.specs.get(spec.name)
        if known is not None and _same_file(known.source, spec.source):
            return  # the same plugin file seen twice (an installed copy and ./plugins of a clone)
        if spec.name in self.duplicates:
            self.duplicates[spec.name].append(spec.source)
        elif spec.name in self.specs:
            self.duplicates[spec.name] = [self.specs.pop(spec.name).source, spec.source]
        else:
            self.specs[spec.name] = spec

    def names(self) -> list[str]:
        return sorted([*self.specs, *self.duplicates])

    def get(self, name: str) -> VariantSpec:
        if name in self.duplicates:
            sources = " and ".join(self.duplicates[name])
            raise VariantError(f"variant '{name}' is defined twice, in {sources}; rename one of them")
        if name not in self.specs:
            close = difflib.get_close_matches(name, self.names(), n=1)
            hint = f"did you mean '{close[0]}'? " if close else ""
            raise VariantError(f"unknown variant '{name}'; {hint}available: {', '.join(self.names())}")
        return self.specs[name]


def _same_file(a: str, b: str) -> bool:
    """Two sources that are one file, or byte-identical copies of it."""
    first, second = Path(a), Path(b)
    if not (first.is_file() and second.is_file()):
        return False
    return first.resolve() == second.resolve() or first.read_bytes() == second.read_bytes()


def _load_file(path: Path) -> Any:
    digest = hashlib.sha1(str(path.resolve()).encode()).hexdigest()[:8]
    module_name = f"attnlab_plugin_{digest}_{path.stem}"
    if module_name in sys.modules:
        return sys.modules[module_name]
    spec = importlib.util.spec_from_file_location(module_name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[module_name]
        raise
    return module


def _specs_from_module(
    module: Any, default_name: str, source: str, copied: frozenset[str] = frozenset()
) -> tuple[list[VariantSpec], str | None]:
    """The variants a plugin module defines; `copied` holds texts also found in an earlier
    plugin file (see _describe)."""
    classes = [
        obj
        for obj in vars(module).values()
        if inspect.isclass(obj) and issubclass(obj, nn.Module) and obj.__module__ == module.__name__
    ]
    marked = [cls for cls in classes if _MARK in cls.__dict__]
    if marked:
        specs = []
        for cls in marked:
            for mark in cls.__dict__[_MARK]:
                extra = {k: v for k, v in mark.items() if k != "name"}
                specs.append(_spec(cls, mark["name"] or default_name, source, copied=copied, **extra))
        return specs, None
    if not classes:
        if _helps_a_run(module):
            return [], None  # a sink or an inputs factory: named by a conf/ YAML file, not a variant
        return [], f"plugin {source} defines no nn.Module subclass; skipped"
    outermost = _outermost(classes)
    if len(outermost) == 1:
        return [_spec(outermost[0], default_name, source, copied=copied)], None
    names = ", ".join(cls.__name__ for cls in outermost or classes)
    count = len(outermost or classes)
    return [], f"plugin {source} defines {count} nn.Module classes ({names}); mark the variant(s) with @attnlab.variant"


def _helps_a_run(module: Any) -> bool:
    """Whether a plugin file without a module defines a sink (a class with `write` or
    `write_sweep`) or an inputs factory (a function whose first parameter is `seed`)."""
    for obj in vars(module).values():
        if getattr(obj, "__module__", None) != module.__name__:
            continue
        if inspect.isclass(obj) and (hasattr(obj, "write") or hasattr(obj, "write_sweep")):
            return True
        if inspect.isfunction(obj) and next(iter(inspect.signature(obj).parameters), None) == "seed":
            return True
    return False


def _outermost(classes: list[type]) -> list[type]:
    """The classes that no other class of the list builds, read from their source, never run.

    A class builds another when its body calls that class's name (`CausalAttention(d_in, ...)`
    in the source's wrapper, a ModuleList comprehension included). The whole body is read, not
    only __init__, because helpers are also built in methods __init__ calls (`_make_head`).
    Nothing is built or run: a plugin's constructor may need arguments attnlab does not have
    yet at discovery. Comments, strings, decorators and base classes do not count, so a
    subclass next to its base stays two top-level modules. A helper built through a
    module-level function is not seen. When a class's source cannot be read
    (defined by exec), every class is a candidate, as before this rule existed.
    """
    built: set[str] = set()
    for cls in classes:
        called = _names_called(cls)
        if called is None:
            return list(classes)
        built |= called - {cls.__name__}
    return [cls for cls in classes if cls.__name__ not in built]


def _names_called(cls: type) -> set[str] | None:
    try:
        source = textwrap.dedent(inspect.getsource(cls))
        tokens = list(tokenize.generate_tokens(io.StringIO(source).readline))
    except (OSError, TypeError, tokenize.TokenError, IndentationError, SyntaxError):
        return None
    body = _body_start(tokens)
    called = set()
    for before, token, after in zip(tokens[body:], tokens[body + 1:], tokens[body + 2:]):
        if token.type == tokenize.NAME and after.string == "(" and before.string != ".":
            called.add(token.string)
    return called


def _body_start(tokens: list[tokenize.TokenInfo]) -> int:
    """The index after the `class Name(...):` header; decorators before it are skipped too, so
    neither a decorator's arguments nor the base classes count as builds."""
    start = next((i for i, t in enumerate(tokens) if t.type == tokenize.NAME and t.string == "class"), 0)
    depth = 0
    for i in range(start, len(tokens)):
        if tokens[i].type != tokenize.OP:
            continue
        text = tokens[i].string
        depth += (text in ("(", "[", "{")) - (text in (")", "]", "}"))
        if text == ":" and depth == 0:
            return i + 1
    return len(tokens)


def _spec(cls: type[nn.Module], name: str, source: str, description: str | None = None,
          params: dict[str, Any] | None = None, expected_finding: tuple[str, str] | None = None,
          reference: str | None = None, copied: frozenset[str] = frozenset(),
          observable: dict[str, int] | None = None) -> VariantSpec:
    finding = tuple(expected_finding) if expected_finding else None
    return VariantSpec(name, cls, description or _describe(cls, copied), dict(params or {}), source, finding, reference,
                       dict(observable or {}))


def _describe(cls: type, copied: frozenset[str]) -> str:
    """A plugin without a description: its file's own first comment (module docstring or the
    leading `#` lines), else its class docstring, else "ClassName from NAME.py".

    Why `copied`: an edited copy of a built-in keeps the built-in's docstring, and `--help`
    then described the copy as the original ("The source's SelfAttention_v1 (the reference
    ...)"). A text that an earlier plugin file also has is not this file's own, so it is skipped.
    """
    module = sys.modules.get(cls.__module__)
    doc = inspect.getdoc(cls) if cls.__doc__ else None
    candidates = [_first_comment(module), doc.splitlines()[0].strip() if doc else None]
    for text in candidates:
        if text and text not in copied:
            return text
    return f"{cls.__name__} from {_file_name(cls)}"


def _file_name(obj: Any) -> str:
    try:
        return Path(inspect.getsourcefile(obj) or "").name or "?"
    except TypeError:
        return "?"


def _first_comment(module: Any) -> str | None:
    """The first line of a module's docstring, else of its leading `#` comment block."""
    if module is None:
        return None
    if module.__doc__ and module.__doc__.strip():
        return module.__doc__.strip().splitlines()[0].strip()
    try:
        lines = inspect.getsource(module).splitlines()
    except (OSError, TypeError):
        return None
    for line in lines:
        stripped = line.strip()
        if not stripped or stripped.startswith("#!") or re.match(r"#.*coding[:=]", stripped):
            continue
        if not stripped.startswith("#"):
            return None  # code before any comment: the file has no leading comment
        text = stripped.lstrip("#").strip()
        if text:
            return text
    return None


def _texts(module: Any) -> set[str]:
    """Every text _describe may take from a plugin module: to spot the same text in a later copy."""
    texts = {_first_comment(module)}
    for obj in vars(module).values():
        if inspect.isclass(obj) and obj.__module__ == module.__name__ and obj.__doc__:
            texts.add(inspect.getdoc(obj).splitlines()[0].strip() if inspect.getdoc(obj) else None)
    return {t for t in texts if t}


def _copied_texts(registry: Registry, module: Any, source: str) -> frozenset[str]:
    """The texts of `module` that an earlier, different plugin file already has; records its own."""
    texts = _texts(module)
    copied = frozenset(t for t in texts if t in registry.seen_texts and not _same_file(registry.seen_texts[t], source))
    for text in texts:
        registry.seen_texts.setdefault(text, source)
    return copied


def _discover_files(registry: Registry) -> None:
    for folder in plugin_dirs():
        for path in sorted(folder.glob("*.py")):
            if path.name.startswith("_"):
                continue
            try:
                module = _load_file(path)
            except BaseException as exc:  # a broken plugin never takes the others down
                registry.warnings.append(f"plugin {path} failed to import: {type(exc).__name__}: {exc}")
                continue
            copied = _copied_texts(registry, module, str(path))
            specs, warning = _specs_from_module(module, path.stem, str(path), copied)
            if warning:
                registry.warnings.append(warning)
            for spec in specs:
                registry.add(spec)


def _discover_entry_points(registry: Registry) -> None:
    for entry in metadata.entry_points(group=ENTRY_POINT_GROUP):
        source = f"entry point {entry.name} = {entry.value}"
        try:
            loaded = entry.load()
        except BaseException as exc:
            registry.warnings.append(f"plugin {source} failed to import: {type(exc).__name__}: {exc}")
            continue
        if inspect.isclass(loaded) and issubclass(loaded, nn.Module):
            module = sys.modules.get(loaded.__module__)
            copied = _copied_texts(registry, module, _source_file(module)) if module else frozenset()
            marks = loaded.__dict__.get(_MARK) or [{}]
            for mark in marks:
                extra = {k: v for k, v in mark.items() if k != "name"}
                registry.add(_spec(loaded, mark.get("name") or entry.name, source, copied=copied, **extra))
        else:
            copied = _copied_texts(registry, loaded, _source_file(loaded))
            specs, warning = _specs_from_module(loaded, entry.name, source, copied)
            if warning:
                registry.warnings.append(warning)
            for spec in specs:
                registry.add(spec)


def _source_file(module: Any) -> str:
    try:
        return inspect.getsourcefile(module) or repr(module)
    except TypeError:
        return repr(module)


@lru_cache(maxsize=1)
def discover() -> Registry:
    registry = Registry()
    _discover_files(registry)
    _discover_entry_points(registry)
    return registry


def list_variants() -> list[str]:
    return discover().names()


def get_variant(name: str) -> VariantSpec:
    return discover().get(name)


def create_variant(name: str, d_in: int, d_out: int, **params: Any) -> nn.Module:
    """Build a variant as `Cls(d_in, d_out, **params)` did, with the top-level keys at their
    defaults (context_length = 6, the book's tokens) for constructors that take them."""
    spec = get_variant(name)
    top = {key: params.pop(key) for key in list(params) if key in CONSTRUCTOR_KEYS}
    values = {**DEFAULT_VALUES, "d_in": d_in, "d_out": d_out, **top}
    args, kwargs = constructor_kwargs(spec, values, params)
    return spec.cls(*args, **kwargs)


# Top-level config keys a constructor may take by name, and the other spellings constructors
# use for them (Hugging Face, nanoGPT, the source's later chapters).
CONSTRUCTOR_KEYS = ("d_in", "d_out", "context_length", "dropout", "num_heads", "num_kv_heads", "qkv_bias")
SPELLINGS = {
    "num_heads": ("num_heads", "n_heads", "n_head", "num_attention_heads"),
    "num_kv_heads": ("num_kv_heads", "n_kv_heads", "num_key_value_heads", "num_kv_groups"),
}
DEFAULT_VALUES = {"context_length": 6, "dropout": 0.0, "num_heads": 2, "num_kv_heads": None, "qkv_bias": False}
_TOP_LEVEL = {spelling: key for key in CONSTRUCTOR_KEYS for spelling in SPELLINGS.get(key, (key,))}
_POSITIONAL = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)


class ConstructorError(UserError):
    """A variant's constructor cannot be filled from the config: a wrong or missing argument."""


def _parameters(spec: VariantSpec) -> list[inspect.Parameter]:
    try:
        return list(inspect.signature(spec.cls).parameters.values())
    except (TypeError, ValueError):  # a constructor implemented in C: take anything, as before
        return [inspect.Parameter("args", inspect.Parameter.VAR_POSITIONAL),
                inspect.Parameter("kwargs", inspect.Parameter.VAR_KEYWORD)]


def constructor_signature(spec: VariantSpec) -> str:
    """The constructor's parameters without annotations, e.g. "(d_in, d_out, context_length,
    dropout, num_heads, qkv_bias=False)"."""
    plain = [p.replace(annotation=inspect.Parameter.empty) for p in _parameters(spec)]
    return str(inspect.Signature(plain))


def constructor_kwargs(spec: VariantSpec, values: dict[str, Any], params: dict[str, Any]) -> tuple[list, dict]:
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
    parameters = _parameters(spec)
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
    args: list = []
    slots = [p for p in parameters if p.kind in _POSITIONAL or p.kind == p.VAR_POSITIONAL]
    for key, slot in zip(("d_in", "d_out"), slots):
        if slot.kind != slot.VAR_POSITIONAL and (_TOP_LEVEL.get(slot.name, key) != key or slot.name in merged):
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
    kwargs.update(merged)
    for p in named.values():
        if p.default is p.empty and _TOP_LEVEL.get(p.name) == "num_kv_heads" and p.name not in kwargs:
            kwargs[p.name] = values.get("num_heads")  # a required kv-head count left unset: one per head
        if p.default is p.empty and p.name not in filled and p.name not in kwargs:
            raise ConstructorError(
                f"variant '{spec.name}' needs the constructor argument '{p.name}': set variant.params.{p.name}=VALUE"
            )
    return args, kwargs


def _resolved(values: dict[str, Any]) -> dict[str, Any]:
    out = {key: values[key] for key in CONSTRUCTOR_KEYS if key in values}
    if out.get("context_length") is None and values.get("n_tokens") is not None:
        out["context_length"] = values["n_tokens"]
    return {key: value for key, value in out.items() if value is not None}


def _show(value: Any) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


# Names of an output projection (the source's out_proj, Hugging Face's o_proj, nanoGPT's c_proj,
# the bonus class's proj); the last component of a parameter's dotted name is compared.
OUTPUT_PROJECTIONS = {"out_proj", "o_proj", "c_proj", "proj", "W_o", "w_o", "wo", "W_out", "output_proj", "dense"}


def auto_reference(spec: VariantSpec, module: nn.Module, batched: bool) -> str:
    """The built-in reference `reference=auto` compares a variant against, chosen from how it is
    declared: its plugin's declaration, its constructor's parameters and the submodules and
    parameters of `module` (the variant built with its constructor arguments), never from what
    its forward does, so a module that forgot its mask or never calls its out_proj is compared
    with a reference that has them (issue 11).

    A declared reference wins; a 2-D module (`batched` False, from the probe call) gets
    `reference` (SelfAttention_v1); a batched one without a head count among its constructor's
    parameters `causal_attention`; an nn.ModuleList of per-head modules without an output
    projection `mha_wrapper`; anything else `multi_head_attention`.
    """
    if spec.reference:
        return spec.reference
    if not batched:
        return "reference"
    if not any(p.name in SPELLINGS["num_heads"] for p in _parameters(spec)):
        return "causal_attention"
    heads = [name for name, child in module.named_modules() if isinstance(child, nn.ModuleList) and _per_head(child)]
    outside = [
        name for name, _ in module.named_parameters()
        if not any(name.startswith(f"{head}.") for head in heads if head)
    ]
    has_projection = any(_projection_name(name) for name in outside)
    if heads and not has_projection:
        return "mha_wrapper"
    return "multi_head_attention"


def _per_head(modules: nn.ModuleList) -> bool:
    """A ModuleList whose items are one module class holding parameters: attention heads."""
    return len(modules) > 0 and len({type(m) for m in modules}) == 1 and any(True for _ in modules[0].parameters())


def _projection_name(parameter: str) -> bool:
    parts = parameter.split(".")
    return any(part in OUTPUT_PROJECTIONS for part in parts[:-1]) or parts[-1] in OUTPUT_PROJECTIONS
