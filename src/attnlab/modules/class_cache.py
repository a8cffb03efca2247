"""A cache keyed by classes, typed as the function it wraps."""

from __future__ import annotations

from collections.abc import Callable
from functools import cache
from typing import ParamSpec, TypeVar, cast

P = ParamSpec("P")
R = TypeVar("R")


def per_class(func: Callable[P, R]) -> Callable[P, R]:
    """`functools.cache` keeping `func`'s signature: cache types every argument as Hashable, and
    mypy refuses a `type[nn.Module]` as Hashable though every class hashes (python/mypy#11470)."""
    return cast("Callable[P, R]", cache(func))
