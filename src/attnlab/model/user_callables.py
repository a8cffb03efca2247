"""A function of the user's named in the config: `MODULE:NAME` (a module importable from the working
folder), `path/to/file.py:NAME`, or a Python callable handed to attnlab.run, held for the session
under the name the config holds (a config holds text, never an object)."""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from attnlab.errors import UserError

_SESSION: dict[str, Callable[..., Any]] = {}


def register(function: Callable[..., Any]) -> str:
    """A Python callable as the name the config holds for this session."""
    name = f"session:{getattr(function, '__name__', 'function')}_{id(function):x}"
    _SESSION[name] = function
    return name


def resolve(key: str, name: str, takes: str) -> Callable[..., Any]:
    """The callable `name` names, or one line naming `key=name` and what is wrong; `takes`: what it
    is given and returns, for that line."""
    if name in _SESSION:
        return _SESSION[name]
    where, _, attribute = name.rpartition(":")
    if not where or not attribute:
        raise UserError(f"{key}={name}: name a callable as MODULE:NAME or path/to/file.py:NAME ({takes})")
    if where.endswith(".py") and not Path(where).is_file():
        raise UserError(f"{key}={name}: no file {where} ({takes})")
    try:
        module = _from_file(Path(where)) if where.endswith(".py") else _from_working_folder(where)
    except Exception as exc:  # noqa: BLE001 - the user's module failed to import: one line, whatever it raised
        raise UserError(f"{key}={name}: cannot import {where} ({type(exc).__name__}: {exc})") from None
    found: object = getattr(module, attribute, None)
    if not callable(found):
        raise UserError(f"{key}={name}: {where} has no callable {attribute} ({takes})")
    return found


def _from_working_folder(module: str) -> Any:
    """`module` importable from the working folder as `python -m attnlab` finds it, whichever way attnlab was started."""
    if os.getcwd() not in sys.path:
        sys.path.append(os.getcwd())
    return importlib.import_module(module)


def _from_file(file: Path) -> Any:
    spec = importlib.util.spec_from_file_location(f"attnlab_user_{file.stem}", file)
    if spec is None or spec.loader is None:  # never for a .py file; named, as any other failure to import is
        raise ImportError(f"no loader for {file}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
