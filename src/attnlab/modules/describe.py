"""A variant's one-line description when its plugin gives none: the file's own first comment,
else its class docstring, else "ClassName from NAME.py"."""

from __future__ import annotations

import inspect
import re
import sys
from pathlib import Path
from types import ModuleType
from typing import Any


def describe(cls: type, copied: frozenset[str]) -> str:
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


def _first_comment(module: ModuleType | None) -> str | None:
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
    """Every text describe may take from a plugin module: to spot the same text in a later copy."""
    texts: set[str | None] = {_first_comment(module)}
    for obj in vars(module).values():
        if inspect.isclass(obj) and obj.__module__ == module.__name__ and obj.__doc__:
            doc = inspect.getdoc(obj)
            texts.add(doc.splitlines()[0].strip() if doc else None)
    return {t for t in texts if t}


def same_file(a: str, b: str) -> bool:
    """Two sources that are one file, or byte-identical copies of it."""
    first, second = Path(a), Path(b)
    if not (first.is_file() and second.is_file()):
        return False
    return first.resolve() == second.resolve() or first.read_bytes() == second.read_bytes()


def copied_texts(seen: dict[str, str], module: Any, source: str) -> frozenset[str]:
    """The texts of `module` that an earlier, different plugin file already has (`seen`: text ->
    the first file that has it); records its own."""
    texts = _texts(module)
    copied = frozenset(t for t in texts if t in seen and not same_file(seen[t], source))
    for text in texts:
        seen.setdefault(text, source)
    return copied
