"""A notebook's own variants: classes and instances held in memory, named for this session.

`attnlab.run(MyAttention)` and `@attnlab.variant("mine")` on a class defined in a cell register the
object here under a name, so the run takes the same Hydra path as a named variant (one job path).
A class is built as a plugin's is (constructor filled from the config, under the seed); an instance
is used as it is: each run builds a deep copy, so the user's object is never changed.
"""

from __future__ import annotations

import copy
import inspect
from dataclasses import dataclass
from typing import Any

from torch import nn

NOTEBOOK = "<notebook>"  # where a class defined in a cell comes from
PREFIX = "notebook:"  # the names given to objects passed to attnlab.run
MARK = "__attnlab_variants__"  # where @attnlab.variant keeps a class's declarations


@dataclass(frozen=True)
class SessionVariant:
    name: str
    cls: Any  # a class, or an InstanceCopies for an instance
    mark: dict[str, Any]  # as @attnlab.variant declared it
    origin: str  # the class's qualified name and source file, or <notebook>


class InstanceCopies:
    """Stands in for a class: "built" with any constructor arguments, a deep copy of one instance."""

    def __init__(self, module: nn.Module) -> None:
        self.module = module
        self.__name__ = type(module).__name__
        self.__qualname__ = type(module).__qualname__
        self.__module__ = type(module).__module__
        self.__doc__ = type(module).__doc__
        self.__signature__ = _signature(type(module))  # filled like its class: auto_reference reads it

    def __call__(self, *args: Any, **kwargs: Any) -> nn.Module:
        return copy.deepcopy(self.module)


def _signature(cls: type) -> inspect.Signature:
    try:
        return inspect.signature(cls)
    except (TypeError, ValueError):
        return inspect.Signature([inspect.Parameter("args", inspect.Parameter.VAR_POSITIONAL)])


_VARIANTS: dict[str, SessionVariant] = {}  # this process's; read only through variants()
_VERSION = [0]  # bumped at each change: the registry's cache is keyed by it


def origin(cls: type) -> str:
    """`pkg.mod.Class (path/to/file.py)`, or `<notebook>` for a class defined in a cell or the REPL."""
    try:
        path = inspect.getsourcefile(cls)
    except (TypeError, OSError):
        path = None
    if path is None or cls.__module__ == "__main__" or path.startswith("<") or "ipykernel" in path:
        return NOTEBOOK
    return f"{cls.__module__}.{cls.__qualname__} ({path})"


def register(obj: type | nn.Module, name: str | None = None, mark: dict[str, Any] | None = None) -> str:
    """Register a class or an instance for this session; returns its name (`notebook:Class`, or
    `notebook:Class-N` for the N-th distinct instance of it), or `name` when given."""
    cls = obj if inspect.isclass(obj) else type(obj)
    built: Any = obj if isinstance(obj, type) else InstanceCopies(obj)  # isinstance: what inspect.isclass tests
    if name is None:
        name = PREFIX + cls.__name__
        if not inspect.isclass(obj):
            same = [v for v in _VARIANTS.values() if isinstance(v.cls, InstanceCopies) and v.cls.module is obj]
            n = sum(isinstance(v.cls, InstanceCopies) and v.name.startswith(name + "-") for v in _VARIANTS.values())
            name = same[0].name if same else f"{name}-{n + 1}"
    known = _VARIANTS.get(name)
    if known is not None and known.cls is built:
        return name
    if known is not None and isinstance(known.cls, InstanceCopies) and known.cls.module is obj:
        return name
    mark = mark if mark is not None else (cls.__dict__.get(MARK) or [{}])[-1]
    _VARIANTS[name] = SessionVariant(name, built, dict(mark), origin(cls))
    _VERSION[0] += 1
    return name


def variants() -> list[SessionVariant]:
    return list(_VARIANTS.values())


def version() -> int:
    return _VERSION[0]


_MODELS: dict[str, nn.Module] = {}  # this process's in-memory models, by the name a run gives them


def register_model(module: nn.Module) -> str:
    """An in-memory model for a `model=` run: `notebook-model:Class-N`, run as it is (a layer
    swapped in place and put back, its modes restored: attnlab.model.model_job.evaluating)."""
    same = [name for name, known in _MODELS.items() if known is module]
    if same:
        return same[0]
    name = f"notebook-model:{type(module).__name__}-{len(_MODELS) + 1}"
    _MODELS[name] = module
    return name


def holds_model(name: str) -> bool:
    return name in _MODELS


def model(name: str) -> tuple[nn.Module, Any] | None:
    """(the in-memory model `name` itself, its config), or None when `name` is none of them.

    The config is the model's own (`.config`, `.cfg`) or, for the source's GPTModel that keeps none,
    the sizes read off its layers: the embedding's width and vocabulary, the attention's head count."""
    module = _MODELS.get(name)
    if module is None:
        return None
    config = getattr(module, "config", None) or getattr(module, "cfg", None)
    if config is None:
        embeddings = [m for m in module.modules() if isinstance(m, nn.Embedding)]
        heads = next((m.num_heads for m in module.modules() if isinstance(getattr(m, "num_heads", None), int)), None)
        config = {"d_in": embeddings[0].embedding_dim if embeddings else None, "num_heads": heads,
                  "vocab_size": embeddings[0].num_embeddings if embeddings else None,
                  "context_length": embeddings[1].num_embeddings if len(embeddings) > 1 else None}
    return module, config
