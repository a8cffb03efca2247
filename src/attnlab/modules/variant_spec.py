"""A variant as its plugin declares it: discovery reads it from the plugin, the registry holds it."""

from __future__ import annotations

import inspect
from dataclasses import dataclass, field
from typing import Any

from attnlab.modules.configs import ConfigConstructor, Constructor
from attnlab.plugin_folders import USER_GROUP

BUILTIN = "builtin:"  # `variant=builtin:NAME`: attnlab's own NAME, where a variant of yours has that name too


@dataclass(frozen=True)
class VariantSpec:
    name: str
    cls: Constructor
    description: str
    params: dict[str, Any]
    source: str
    expected_finding: tuple[str, str] | None = None  # (code, stage) a bug-zoo variant must trigger
    reference: str | None = None  # the variant it is compared against, declared by the plugin; None: auto
    tags: tuple[str, ...] = ()  # its group (a built-in's folder, or `yours`) first, then the declared ones
    output: tuple[str, str] = ("", "")  # what its plugin printed when imported: (stdout, stderr)
    observable: dict[str, int] = field(default_factory=dict)  # the smallest size its change shows at: {"head_dim": 2}
    multi_head: str | None = None  # a single-head class's multi-head counterpart (the same change, in every head)

    @property
    def signature(self) -> str:
        """The constructor's parameters, as `--help` lists them."""
        return constructor_signature(self)

    @property
    def group(self) -> str:
        return self.tags[0] if self.tags else ""

    @property
    def yours(self) -> bool:
        """A plugin file of yours, an entry point or a notebook's class (`source` says which)."""
        return self.group == USER_GROUP

    @property
    def origin(self) -> str:
        """What a record says the variant came from: your file, entry point or class; "" for attnlab's own."""
        return self.source if self.yours else ""

    @property
    def builtin(self) -> bool:
        """Shipped in attnlab.plugins (a Hugging Face class, with no group, is neither attnlab's nor yours)."""
        return self.group not in ("", USER_GROUP)


def constructor_parameters(spec: VariantSpec) -> list[inspect.Parameter]:
    try:
        parameters = list(inspect.signature(spec.cls).parameters.values())
    except (TypeError, ValueError):  # a constructor implemented in C: take anything, as before
        return [inspect.Parameter("args", inspect.Parameter.VAR_POSITIONAL),
                inspect.Parameter("kwargs", inspect.Parameter.VAR_KEYWORD)]
    return _inherited(spec.cls) if _passes_everything_on(parameters) else parameters


def _passes_everything_on(parameters: list[inspect.Parameter]) -> bool:
    """`__init__(self, *args, **kwargs)`: a subclass that hands its arguments to its base's."""
    return [p.kind for p in parameters] == [inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD]


def _inherited(cls: object) -> list[inspect.Parameter]:
    """The parameters of the first base class whose constructor names them (a user's copy that
    subclasses a library's class and changes one line)."""
    for base in getattr(cls, "__mro__", ())[1:]:
        if base.__init__ is object.__init__:
            break
        try:
            parameters = list(inspect.signature(base).parameters.values())
        except (TypeError, ValueError):
            break
        if not _passes_everything_on(parameters):
            return parameters
    return [inspect.Parameter("args", inspect.Parameter.VAR_POSITIONAL),
            inspect.Parameter("kwargs", inspect.Parameter.VAR_KEYWORD)]


def constructor_signature(spec: VariantSpec) -> str:
    """The constructor's parameters without annotations, the variant's declared params as their
    defaults (what `variant=NAME` builds), e.g. "(d_in, d_out, context_length, dropout,
    num_heads, qkv_bias=False, out_proj=False)"."""
    if isinstance(spec.cls, ConfigConstructor):
        return spec.cls.describe()
    plain = [p.replace(annotation=inspect.Parameter.empty,
                       default=spec.params.get(p.name, p.default)) for p in constructor_parameters(spec)]
    return str(inspect.Signature(plain))
