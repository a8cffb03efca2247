"""The plugin import sandbox: a plugin file loaded as a module of its own name, once while it stays
the same, its sibling files importable by bare name while its folder loads, what it prints kept
(not shown), and torch's process-wide settings and functions it changes at import undone.
Discovery reads the loaded modules; nothing here knows what a variant is.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.abc
import importlib.machinery
import importlib.util
import io
import os
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TextIO

import torch

from attnlab.process_state import ORIGINALS, OWNERS

OUTPUT = "__attnlab_output__"  # (stdout, stderr) a plugin module printed while it was imported
CONTENT = "__attnlab_content__"  # the digest of the file's bytes it was loaded from
_TORCH_DIR = str(Path(torch.__file__).parent) + os.sep


def content_hash(path: Path) -> str:
    try:
        return hashlib.sha1(path.read_bytes()).hexdigest()
    except OSError:  # removed meanwhile: the next look finds it gone
        return ""


@contextlib.contextmanager
def torch_state_kept(warnings: list[str], path: Path | str, check: bool) -> Iterator[None]:
    """torch's process-wide settings and functions as they were before `path` was imported: a change
    is undone and warned (a replaced `torch.softmax` would change every other variant's forward in
    this process, a default dtype the reference's numbers)."""
    if not check:
        yield
        return
    before, functions = _torch_state(), {label: dict(vars(owner)) for label, owner in OWNERS.items()}
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
        replaced = _put_back(functions)
        what = [f"changed torch's {', '.join(changed)}"] * bool(changed) + [f"replaced {', '.join(replaced)}"] * bool(replaced)
        if what:
            warnings.append(f"plugin {path} {' and '.join(what)} at import: undone "
                            f"(set it inside your module, not at import)")


def _put_back(before: dict[str, dict[str, Any]]) -> list[str]:
    """torch's public functions (`torch.*`, `torch.nn.functional.*`, `torch.Tensor.*`) a plugin's
    import replaced, each put back as it was; returns their names, as `torch.softmax`."""
    missing = object()
    names = []
    for label, owner in OWNERS.items():
        for name in ORIGINALS[label]:
            was, now = before[label].get(name, missing), vars(owner).get(name, missing)
            if now is was or _torchs_own(now):
                continue
            names.append(f"{label}.{name}")
            if was is missing:  # inherited before (a Tensor method of torch._C.TensorBase)
                delattr(owner, name)
            else:
                setattr(owner, name, was)
    return names


def _torchs_own(value: Any) -> bool:
    """A wrapper torch itself put in place meanwhile (importing torch._dynamo, which a plugin's import
    may do, wraps torch.manual_seed): defined in torch's own files."""
    code = getattr(getattr(value, "__func__", value), "__code__", None)
    return code is not None and code.co_filename.startswith(_TORCH_DIR)


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
            with siblings(path.parent), contextlib.suppress(BaseException):
                load_file(path)
            done.write(f"{name}\0")
            done.flush()


def load_file(path: Path) -> Any:
    """A plugin file as a module of its own name (two plugin folders may both have a `mine.py`),
    loaded once; what it prints meanwhile is kept on it (`OUTPUT`), not shown."""
    digest = hashlib.sha1(str(path.resolve()).encode()).hexdigest()[:8]
    module_name = f"attnlab_plugin_{digest}_{path.stem}"
    content = content_hash(path)
    known = sys.modules.get(module_name)
    if known is not None and getattr(known, CONTENT, None) == content:
        return known  # loaded once while it stays the same; an edited file is loaded again
    spec = importlib.util.spec_from_file_location(module_name, path)
    assert spec is not None and spec.loader is not None  # a .py file always has a spec with a source loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    try:
        with held_output() as output:
            spec.loader.exec_module(module)
    except BaseException:
        sys.modules.pop(module_name, None)
        raise
    setattr(module, OUTPUT, output())
    setattr(module, CONTENT, content)
    return module


class _Held(io.TextIOBase):
    """A stream that keeps what is written while `held`, then writes through to the real one: a
    plugin that keeps `sys.stdout` (a logging handler made at import) still reaches the terminal."""

    def __init__(self, stream: TextIO) -> None:
        super().__init__()
        self.stream, self.held = stream, True
        self.parts: list[str] = []

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

    @property  # typeshed declares TextIOBase.encoding a writable attribute; CPython's is a read-only property
    def encoding(self) -> str:  # type: ignore[override]
        return getattr(self.stream, "encoding", "utf-8")


@contextlib.contextmanager
def held_output() -> Iterator[Callable[[], tuple[str, str]]]:
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
def siblings(folder: Path) -> Iterator[set[Path]]:
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
