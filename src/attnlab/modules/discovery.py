"""Plugin discovery: load every plugin file and entry point on its own and read the variants it
declares, without building or running any of them.

A file `NAME.py` defining one `nn.Module` subclass is the variant `NAME` with no import of attnlab
at all, so the source's class pasted verbatim just works; a file whose classes build one another
(the source's wrapper builds `CausalAttention` heads) is the variant of its outermost class; a file
that defines none but imports one (`from mylib import MyAttention`) is the variant of that class.
A file may import its sibling files (`from helpers import X`); a sibling imported that way is a
helper, a variant only where it says so with `@attnlab.variant`. What a plugin prints while it is
imported is kept with its variants, for the run that uses them, not shown to every command.
"""

from __future__ import annotations

import hashlib
import inspect
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any, TypeVar

from torch import nn

from attnlab.modules import session
from attnlab.modules.describe import copied_texts, describe
from attnlab.modules.import_probe import deadly_imports
from attnlab.modules.outermost_class import outermost
from attnlab.modules.plugin_import import OUTPUT, content_hash, held_output, load_file, siblings, torch_state_kept
from attnlab.modules.variant_spec import VariantSpec
from attnlab.plugin_folders import USER_GROUP, plugin_files
from attnlab.process_state import ORIGINALS  # noqa: F401 - torch's own functions noted before any plugin is imported

ENTRY_POINT_GROUP = "attnlab.variants"
_MARK = session.MARK

ModuleClass = TypeVar("ModuleClass", bound=type)


def variant(
    name: str | None = None,
    *,
    description: str | None = None,
    params: dict[str, Any] | None = None,
    expected_finding: tuple[str, str] | None = None,
    reference: str | None = None,
    tags: tuple[str, ...] | list[str] = (),
    observable: dict[str, int] | None = None,
    multi_head: str | None = None,
) -> Callable[[ModuleClass], ModuleClass]:
    """Name a variant explicitly; allows several variants in one file, default params, the
    reference it is compared against (`reference=auto` then chooses this one) and tags that
    `attnlab.list_variants(tag=...)` selects by. `observable`: the smallest size at which its
    change can be seen (`n_tokens`, `head_dim`, `d_in`, `d_out`, `|d_in - d_out|`); below it a
    run says so in one `not_checked` line instead of diagnosing. `multi_head`: a single-head
    class's counterpart of several heads with the same change (what training builds for it, what a
    model's layer of several heads is offered). A default param must be a config value (a
    number, string, bool, None, or a list or dict of them): anything else fails this file only."""
    for key, value in (params or {}).items():
        if not _plain(value):
            raise TypeError(f"params['{key}'] is a {type(value).__name__}; a default param is a number, string, "
                            "bool, None, or a list or dict of them")
    if isinstance(tags, str) or not all(isinstance(tag, str) for tag in tags):
        raise TypeError(f"tags={tags!r}; tags are a tuple of strings, e.g. tags=('gqa',)")

    def mark(cls: ModuleClass) -> ModuleClass:
        marks = list(cls.__dict__.get(_MARK, ()))
        marks.append(dict(name=name, description=description, params=dict(params or {}),
                          expected_finding=expected_finding, reference=reference, tags=tuple(tags),
                          observable=dict(observable or {}), multi_head=multi_head))
        setattr(cls, _MARK, marks)
        if cls.__module__ == "__main__":  # defined in a notebook cell or the REPL: this session's
            session.register(cls, name or _snake(cls.__name__), marks[-1])
        return cls

    return mark


def _plain(value: Any) -> bool:
    if value is None or isinstance(value, (bool, int, float, str)):
        return True
    if isinstance(value, (list, tuple)):
        return all(_plain(item) for item in value)
    return isinstance(value, dict) and all(isinstance(k, str) and _plain(v) for k, v in value.items())


@dataclass
class PluginsRead:
    """What the plugin files and entry points declared, as discovery reads them one by one."""

    declarations: list[VariantSpec] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    seen_texts: dict[str, str] = field(default_factory=dict, repr=False)  # docstring/comment -> first file
    fingerprint: str = ""  # the plugin files' names and contents, as read


def find_plugins() -> PluginsRead:
    """Every variant of the plugin files (built-ins, ./plugins, ATTNLAB_PLUGIN_PATH), then of the
    installed entry points; a plugin that fails is one warning, and the others load."""
    skipped: list[str] = []
    files = plugin_files(skipped)
    found = PluginsRead(fingerprint=_fingerprint(files), warnings=skipped)
    by_folder: dict[Path, list[tuple[Path, str]]] = {}
    for path, group in files:
        by_folder.setdefault(path.parent, []).append((path, group))
    for folder, files in by_folder.items():
        _read_folder(found, folder, files)
    _read_entry_points(found)
    return found


def plugin_fingerprint() -> str:
    """A digest of every plugin file's path and contents: changes when one is added, removed or edited."""
    return _fingerprint(plugin_files())


def _fingerprint(files: list[tuple[Path, str]]) -> str:
    digest = hashlib.sha1()
    for path, _group in files:
        digest.update(str(path).encode() + b"\0" + content_hash(path).encode())
    return digest.hexdigest()


def _read_folder(found: PluginsRead, folder: Path, files: list[tuple[Path, str]]) -> None:
    """Load a folder's files first, then read them: a sibling one of them imports is a helper
    wherever it sorts."""
    loaded = []
    deadly = deadly_imports([path for path, group in files]) if files[0][1] == USER_GROUP else {}
    with siblings(folder) as helpers:
        for path, group in files:
            if path in deadly:
                found.warnings.append(f"plugin {path} not loaded: {deadly[path]}")
                continue
            try:
                with torch_state_kept(found.warnings, path, group == USER_GROUP):
                    loaded.append((path, group, load_file(path)))
            except BaseException as exc:  # a broken plugin never takes the others down
                found.warnings.append(f"plugin {path} failed to import: {type(exc).__name__}: {_one_line(exc)}")
    for path, group, module in loaded:
        copied = copied_texts(found.seen_texts, module, str(path))
        if path in helpers and not any(_MARK in cls.__dict__ for cls in _own_classes(module)):
            continue  # a helper of its siblings, not a variant
        _add(found, *declarations_of(module, path.stem, str(path), group, copied))


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split())


def _add(found: PluginsRead, declarations: list[VariantSpec], warning: str | None) -> None:
    found.declarations += declarations
    if warning:
        found.warnings.append(warning)


def _own_classes(module: Any) -> list[type]:
    return [obj for obj in vars(module).values()
            if inspect.isclass(obj) and issubclass(obj, nn.Module) and obj.__module__ == module.__name__]


def _imported_classes(module: Any) -> list[type]:
    """The nn.Module classes a plugin module imports (nn.Module itself and classes that declare
    their own variants elsewhere aside)."""
    classes = []
    for obj in vars(module).values():
        if (inspect.isclass(obj) and issubclass(obj, nn.Module) and obj is not nn.Module
                and obj.__module__ != module.__name__ and _MARK not in obj.__dict__ and obj not in classes):
            classes.append(obj)
    return classes


def declaration(cls: type, name: str, mark: dict[str, Any], source: str, group: str) -> VariantSpec:
    """A variant declared outside a file (a notebook's class or instance), as a plugin's would be."""
    return _declaration(cls, name, mark, source, group, frozenset(), ("", ""))


def _declaration(cls: type, name: str, mark: dict[str, Any], source: str, group: str,
                 copied: frozenset[str], output: tuple[str, str]) -> VariantSpec:
    finding = mark.get("expected_finding")
    return VariantSpec(name, cls, mark.get("description") or describe(cls, copied), dict(mark.get("params") or {}),
                       source, tuple(finding) if finding else None, mark.get("reference"),
                       tuple(dict.fromkeys((group, *mark.get("tags", ())))), output,
                       dict(mark.get("observable") or {}), mark.get("multi_head"))


def declarations_of(module: Any, default_name: str, source: str, group: str,
                    copied: frozenset[str] = frozenset()) -> tuple[list[VariantSpec], str | None]:
    """The variants a plugin module defines, and a warning where it defines none; `copied` holds
    texts also found in an earlier plugin file (see describe)."""
    output = getattr(module, OUTPUT, ("", ""))

    def declare(cls: type, name: str, mark: dict[str, Any] | None = None) -> VariantSpec:
        return _declaration(cls, name, mark or {}, source, group, copied, output)

    classes = _own_classes(module)
    marked = [cls for cls in classes if _MARK in cls.__dict__]
    if marked:
        return [declare(cls, mark["name"] or default_name, mark) for cls in marked for mark in cls.__dict__[_MARK]], None
    if not classes:
        return _imported(module, default_name, source, declare)
    top = outermost(classes)
    if len(top) == 1:
        return [declare(top[0], default_name)], None
    names = ", ".join(cls.__name__ for cls in top or classes)
    return [], f"plugin {source} defines {len(top or classes)} nn.Module classes ({names}); mark the variant(s) with @attnlab.variant"


def _imported(module: Any, default_name: str, source: str,
              declare: Callable[[type, str], VariantSpec]) -> tuple[list[VariantSpec], str | None]:
    """A file that defines no module: the one it imports, or the one named like the file."""
    if _helps_a_run(module):
        return [], None  # a sink or an inputs factory (one may import nn.Embedding): named by a conf/ YAML file
    imported = _imported_classes(module)
    if not imported:
        return [], f"plugin {source} defines no nn.Module subclass; skipped"
    like_file = [cls for cls in imported if cls.__name__.lower() == default_name.replace("_", "").lower()]
    if len(imported) == 1 or len(like_file) == 1:
        return [declare((like_file or imported)[0], default_name)], None
    names = ", ".join(cls.__name__ for cls in imported)
    return [], (f"plugin {source} imports {len(imported)} nn.Module classes ({names}) and defines none; "
                f"name the file after the one to run (e.g. {_snake(imported[0].__name__)}.py) or import only it")


def _snake(name: str) -> str:
    return "".join(f"_{c.lower()}" if c.isupper() and i else c.lower() for i, c in enumerate(name))


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


def _read_entry_points(found: PluginsRead) -> None:
    for entry in metadata.entry_points(group=ENTRY_POINT_GROUP):
        source = f"entry point {entry.name} = {entry.value}"
        try:
            with held_output() as output, torch_state_kept(found.warnings, source, True):
                loaded = entry.load()
        except BaseException as exc:
            found.warnings.append(f"plugin {source} failed to import: {type(exc).__name__}: {_one_line(exc)}")
            continue
        module = sys.modules.get(loaded.__module__) if inspect.isclass(loaded) else loaded
        copied = copied_texts(found.seen_texts, module, _source_file(module)) if module else frozenset()
        if inspect.isclass(loaded) and issubclass(loaded, nn.Module):
            marks = loaded.__dict__.get(_MARK) or [{}]
            found.declarations += [_declaration(loaded, mark.get("name") or entry.name, mark, source, USER_GROUP,
                                                copied, output()) for mark in marks]
        else:
            setattr(loaded, OUTPUT, getattr(loaded, OUTPUT, output()))
            _add(found, *declarations_of(loaded, entry.name, source, USER_GROUP, copied))


def _source_file(module: Any) -> str:
    try:
        return inspect.getsourcefile(module) or repr(module)
    except TypeError:
        return repr(module)
