"""Work spread over threads: numpy, zlib and torch's pooling let go of the GIL while they draw."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from typing import Any


def in_threads(fn: Callable[[Any], Any], items: Iterable[Any]) -> list[Any]:
    """[fn(item) for item in items], on every core: numpy, zlib and torch's pooling let go of the
    GIL, and a long run's images were most of its wall time (benchmarks/README.md)."""
    items = list(items)
    if len(items) < 2:
        return [fn(item) for item in items]
    with ThreadPoolExecutor(max_workers=min(len(items), os.cpu_count() or 1)) as pool:
        return list(pool.map(fn, items))
