"""Variant registry: discover attention variants as plugins, name them, build them.

Modelled on timm's `register_model` / `create_model` / `list_models`. Four sources, in order:
the built-ins shipped in `attnlab.plugins`, `./plugins` in the working folder, every folder on
`ATTNLAB_PLUGIN_PATH`, and installed distributions' entry points in the group
`attnlab.variants`. A file `NAME.py` defining one `nn.Module` subclass is the variant `NAME`
with no import of attnlab at all, so the source's class pasted verbatim just works.
"""

from __future__ import annotations

import difflib
import hashlib
import importlib.util
import inspect
import os
import sys
from dataclasses import dataclass, field
from functools import lru_cache
from importlib import metadata, resources
from pathlib import Path
from typing import Any, Callable, TypeVar

from torch import nn

from attnlab.errors import UserError

ENTRY_POINT_GROUP = "attnlab.variants"
PLUGIN_PATH_ENV = "ATTNLAB_PLUGIN_PATH"
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


class VariantError(UserError):
    """A user-facing problem with a variant name: unknown, or defined twice."""


def variant(
    name: str | None = None,
    *,
    description: str | None = None,
    params: dict[str, Any] | None = None,
    expected_finding: tuple[str, str] | None = None,
) -> Callable[[ModuleClass], ModuleClass]:
    """Name a variant explicitly; allows several variants in one file and default params."""

    def mark(cls: ModuleClass) -> ModuleClass:
        marks = list(cls.__dict__.get(_MARK, ()))
        marks.append(
            dict(name=name, description=description, params=dict(params or {}), expected_finding=expected_finding)
        )
        setattr(cls, _MARK, marks)
        return cls

    return mark


@dataclass
class Registry:
    specs: dict[str, VariantSpec] = field(default_factory=dict)
    duplicates: dict[str, list[str]] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)

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


def builtin_plugin_dir() -> Path:
    return Path(str(resources.files("attnlab.plugins")))


def plugin_dirs() -> list[Path]:
    dirs = [builtin_plugin_dir(), Path.cwd() / "plugins"]
    dirs += [Path(p) for p in os.environ.get(PLUGIN_PATH_ENV, "").split(os.pathsep) if p]
    unique: list[Path] = []
    for folder in dirs:
        if folder.is_dir() and folder.resolve() not in [u.resolve() for u in unique]:
            unique.append(folder)
    return unique


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


def _specs_from_module(module: Any, default_name: str, source: str) -> tuple[list[VariantSpec], str | None]:
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
                specs.append(_spec(cls, mark["name"] or default_name, source, **{k: v for k, v in mark.items() if k != "name"}))
        return specs, None
    if len(classes) == 1:
        return [_spec(classes[0], default_name, source)], None
    if not classes:
        return [], f"plugin {source} defines no nn.Module subclass; skipped"
    names = ", ".join(cls.__name__ for cls in classes)
    return [], f"plugin {source} defines {len(classes)} nn.Module classes ({names}); mark the variant(s) with @attnlab.variant"


def _spec(cls: type[nn.Module], name: str, source: str, description: str | None = None,
          params: dict[str, Any] | None = None, expected_finding: tuple[str, str] | None = None) -> VariantSpec:
    doc = inspect.getdoc(cls) if cls.__doc__ else None
    description = description or (doc.splitlines()[0] if doc else f"{cls.__name__} from {Path(source).name}")
    finding = tuple(expected_finding) if expected_finding else None
    return VariantSpec(name, cls, description, dict(params or {}), source, finding)


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
            specs, warning = _specs_from_module(module, path.stem, str(path))
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
            marks = loaded.__dict__.get(_MARK) or [{}]
            for mark in marks:
                extra = {k: v for k, v in mark.items() if k != "name"}
                registry.add(_spec(loaded, mark.get("name") or entry.name, source, **extra))
        else:
            specs, warning = _specs_from_module(loaded, entry.name, source)
            if warning:
                registry.warnings.append(warning)
            for spec in specs:
                registry.add(spec)


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
    spec = get_variant(name)
    return spec.cls(d_in, d_out, **{**spec.params, **params})
