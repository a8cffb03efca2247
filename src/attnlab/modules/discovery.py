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

import contextlib
import hashlib
import importlib.abc
import importlib.machinery
import importlib.util
import inspect
import io
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any, TypeVar

import torch
from torch import nn

from attnlab.modules import session
from attnlab.modules.describe import copied_texts, describe
from attnlab.modules.import_probe import deadly_imports
from attnlab.modules.outermost_class import outermost
from attnlab.modules.variant_spec import VariantSpec
from attnlab.plugin_folders import USER_GROUP, plugin_files
from attnlab.process_state import ORIGINALS  # noqa: F401 - torch's own functions noted before any plugin is imported

ENTRY_POINT_GROUP = "attnlab.variants"
_MARK = session.MARK
_OUTPUT = "__attnlab_output__"  # (stdout, stderr) a plugin module printed while it was imported
_CONTENT = "__attnlab_content__"  # the digest of the file's bytes it was loaded from

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
) -> Callable[[ModuleClass], ModuleClass]:
    """Name a variant explicitly; allows several variants in one file, default params, the
    reference it is compared against (`reference=auto` then chooses this one) and tags that
    `attnlab.list_variants(tag=...)` selects by. `observable`: the smallest size at which its
    change can be seen (`n_tokens`, `head_dim`, `d_in`, `d_out`, `|d_in - d_out|`); below it a
    run says so in one `not_checked` line instead of diagnosing. A default param must be a config value (a
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
                          observable=dict(observable or {})))
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
        digest.update(str(path).encode() + b"\0" + _content_hash(path).encode())
    return digest.hexdigest()


def _content_hash(path: Path) -> str:
    try:
        return hashlib.sha1(path.read_bytes()).hexdigest()
    except OSError:  # removed meanwhile: the next look finds it gone
        return ""


def _read_folder(found: PluginsRead, folder: Path, files: list[tuple[Path, str]]) -> None:
    """Load a folder's files first, then read them: a sibling one of them imports is a helper
    wherever it sorts."""
    loaded = []
    deadly = deadly_imports([path for path, group in files]) if files[0][1] == USER_GROUP else {}
    with _siblings(folder) as helpers:
        for path, group in files:
            if path in deadly:
                found.warnings.append(f"plugin {path} not loaded: {deadly[path]}")
                continue
            try:
                with _torch_state_kept(found, path, group == USER_GROUP):
                    loaded.append((path, group, load_file(path)))
            except BaseException as exc:  # a broken plugin never takes the others down
                found.warnings.append(f"plugin {path} failed to import: {type(exc).__name__}: {_one_line(exc)}")
    for path, group, module in loaded:
        copied = copied_texts(found.seen_texts, module, str(path))
        if path in helpers and not any(_MARK in cls.__dict__ for cls in _own_classes(module)):
            continue  # a helper of its siblings, not a variant
        _add(found, *declarations_of(module, path.stem, str(path), group, copied))


@contextlib.contextmanager
def _torch_state_kept(found: PluginsRead, path: Path, check: bool) -> Iterator[None]:
    """torch's process-wide settings as they were before `path` was imported: a change is undone and
    warned (it would change the reference's numbers in every run of this process)."""
    if not check:
        yield
        return
    before = _torch_state()
    try:
        yield
    finally:
        changed = [name for name, value in _torch_state().items() if not _same_state(value, before[name])]
        if changed:
            torch.set_default_dtype(before["default dtype"])
            torch.set_rng_state(before["random state"])
            torch.set_grad_enabled(before["grad mode"])
            torch.set_num_threads(before["threads"])
            torch.use_deterministic_algorithms(before["deterministic algorithms"][0],
                                               warn_only=before["deterministic algorithms"][1])
            found.warnings.append(f"plugin {path} changed torch's {', '.join(changed)} at import: undone "
                                  f"(set it inside your module, not at import)")


def _torch_state() -> dict[str, Any]:
    return {"default dtype": torch.get_default_dtype(), "random state": torch.get_rng_state(),
            "grad mode": torch.is_grad_enabled(), "threads": torch.get_num_threads(),
            "deterministic algorithms": (torch.are_deterministic_algorithms_enabled(),
                                         torch.is_deterministic_algorithms_warn_only_enabled())}


def _same_state(a: Any, b: Any) -> bool:
    return torch.equal(a, b) if isinstance(a, torch.Tensor) else a == b


def probe_imports(done_file: str, files: list[str]) -> None:
    """In attnlab.modules.import_probe's child: import each file in order, noting each one finished
    (a file whose import raises is finished: discovery reports it)."""
    with open(done_file, "a", encoding="utf-8") as done:
        for name in files:
            path = Path(name)
            with _siblings(path.parent), contextlib.suppress(BaseException):
                load_file(path)
            done.write(f"{name}\0")
            done.flush()


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split())


def _add(found: PluginsRead, declarations: list[VariantSpec], warning: str | None) -> None:
    found.declarations += declarations
    if warning:
        found.warnings.append(warning)


def load_file(path: Path) -> Any:
    """A plugin file as a module of its own name (two plugin folders may both have a `mine.py`),
    loaded once; what it prints meanwhile is kept on it (`_OUTPUT`), not shown."""
    digest = hashlib.sha1(str(path.resolve()).encode()).hexdigest()[:8]
    module_name = f"attnlab_plugin_{digest}_{path.stem}"
    content = _content_hash(path)
    known = sys.modules.get(module_name)
    if known is not None and getattr(known, _CONTENT, None) == content:
        return known  # loaded once while it stays the same; an edited file is loaded again
    spec = importlib.util.spec_from_file_location(module_name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    try:
        with _held_output() as output:
            spec.loader.exec_module(module)
    except BaseException:
        sys.modules.pop(module_name, None)
        raise
    setattr(module, _OUTPUT, output())
    setattr(module, _CONTENT, content)
    return module


class _Held(io.TextIOBase):
    """A stream that keeps what is written while `held`, then writes through to the real one: a
    plugin that keeps `sys.stdout` (a logging handler made at import) still reaches the terminal."""

    def __init__(self, stream: Any) -> None:
        super().__init__()
        self.stream, self.held, self.parts = stream, True, []

    def write(self, text: str) -> int:
        if self.held:
            self.parts.append(text)
        else:
            self.stream.write(text)
        return len(text)

    def flush(self) -> None:
        if not self.held:
            self.stream.flush()

    def fileno(self) -> int:  # faulthandler and subprocesses write to the descriptor itself
        return self.stream.fileno()

    def isatty(self) -> bool:
        return self.stream.isatty()

    @property
    def encoding(self) -> str:
        return getattr(self.stream, "encoding", "utf-8")


@contextlib.contextmanager
def _held_output() -> Iterator[Callable[[], tuple[str, str]]]:
    """What a plugin prints while it is imported: (stdout, stderr), kept and not shown."""
    out, err = _Held(sys.stdout), _Held(sys.stderr)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            yield lambda: ("".join(out.parts), "".join(err.parts))
    finally:
        out.held = err.held = False


class _SharedLoader(importlib.abc.Loader):
    """Hands a sibling import the plugin module `load_file` loaded (or loads it now), so the file
    runs once whether discovery or a sibling reaches it first."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.own_spec: importlib.machinery.ModuleSpec | None = None

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> Any:
        module = load_file(self.path)
        self.own_spec = module.__spec__
        return module

    def exec_module(self, module: Any) -> None:
        module.__spec__ = self.own_spec  # the import machinery set the sibling's; the module keeps its own


class _SiblingFinder(importlib.abc.MetaPathFinder):
    """`import helpers` in a plugin file finds helpers.py (or a package helpers/) in its folder.
    Last on the meta path: an installed module of the same name wins, as it would for a script
    run from elsewhere."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.imported: dict[str, Path] = {}

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> importlib.machinery.ModuleSpec | None:
        file = self.folder / f"{name}.py"
        if path is not None or "." in name:
            return None
        if file.is_file():
            self.imported[name] = file
            return importlib.util.spec_from_loader(name, _SharedLoader(file), origin=str(file))
        spec = importlib.machinery.PathFinder.find_spec(name, [str(self.folder)])
        if spec is not None:
            self.imported[name] = self.folder / name
        return spec


@contextlib.contextmanager
def _siblings(folder: Path) -> Iterator[set[Path]]:
    """While a folder loads, its files import each other by bare name; yields the files imported
    that way. Afterwards the bare names are forgotten, so another folder's `helpers` is its own."""
    finder = _SiblingFinder(folder)
    helpers: set[Path] = set()
    sys.meta_path.append(finder)
    try:
        yield helpers
    finally:
        sys.meta_path.remove(finder)
        for name in finder.imported:
            for key in [k for k in sys.modules if k == name or k.startswith(f"{name}.")]:
                del sys.modules[key]
        helpers |= set(finder.imported.values())


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
                       dict(mark.get("observable") or {}))


def declarations_of(module: Any, default_name: str, source: str, group: str,
                    copied: frozenset[str] = frozenset()) -> tuple[list[VariantSpec], str | None]:
    """The variants a plugin module defines, and a warning where it defines none; `copied` holds
    texts also found in an earlier plugin file (see describe)."""
    output = getattr(module, _OUTPUT, ("", ""))

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
            with _held_output() as output:
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
            setattr(loaded, _OUTPUT, getattr(loaded, _OUTPUT, output()))
            _add(found, *declarations_of(loaded, entry.name, source, USER_GROUP, copied))


def _source_file(module: Any) -> str:
    try:
        return inspect.getsourcefile(module) or repr(module)
    except TypeError:
        return repr(module)
