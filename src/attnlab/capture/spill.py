"""Spilling a module's large stages to disk, memory-mapped, so only one module's stay in memory.

At 4096 tokens and 12 heads one (batch, heads, query, key) stage is 1.6 GB; the reference's
three would double what the run holds. Spilled, they are `.npy` files (never pickle) read through
a memory map: a pass over one reads it from the page cache, and `release` drops its pages from
the process again, so a pass costs one stage's memory at a time, not three.
"""

from __future__ import annotations

import functools
import mmap
import warnings
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
import torch

_MAP = "_attnlab_memory_map"
Function = TypeVar("Function", bound=Callable[..., Any])
Memory = tuple[int, tuple[int, ...], tuple[int, ...], str]  # an array's address, shape, strides and dtype


def spill(stages: dict[str, torch.Tensor], names: Iterable[str], folder: Path, prefix: str = "") -> list[str]:
    """Write each named stage to `folder/<prefix><name>.npy` and replace it by its memory map."""
    folder.mkdir(parents=True, exist_ok=True)
    done = []
    for name in names:
        tensor = stages.get(name)
        if tensor is None:
            continue
        path = folder / f"{prefix}{name}.npy"
        np.save(path, tensor.detach().cpu().numpy(), allow_pickle=False)
        stages[name] = mapped(path)
        done.append(name)
    return done


def spill_arrays(arrays: dict[str, np.ndarray | None], folder: Path, prefix: str = "",
                 written: dict[Memory, np.ndarray] | None = None) -> None:
    """The numpy form of `spill`: each array written to an .npy file and replaced by its memory map.
    `written`: the maps of arrays written so far, by their memory: an array over the same memory as
    one of them (an unedited stage both sides of a record hold) takes its map, written once."""
    folder.mkdir(parents=True, exist_ok=True)
    written = {} if written is None else written
    for name, values in arrays.items():
        if values is not None and not isinstance(values, np.memmap):
            same = _memory_of(values)
            if same not in written:
                path = folder / f"{prefix}{name}.npy"
                np.save(path, values, allow_pickle=False)
                written[same] = np.load(path, mmap_mode="r", allow_pickle=False)
            arrays[name] = written[same]


def distinct_bytes(*arrays: np.ndarray | None) -> int:
    """The bytes of `arrays`, an array over the same memory as another counted once."""
    return sum(values.nbytes for values in {_memory_of(v): v for v in arrays if v is not None}.values())


def _memory_of(values: np.ndarray) -> Memory:
    """What tells an array's values apart from another's without reading them: where they are and how laid out."""
    return values.__array_interface__["data"][0], values.shape, values.strides, values.dtype.str


def mapped(path: Path) -> torch.Tensor:
    """A read-only tensor over an .npy file's memory map (allow_pickle=False)."""
    memory_map = np.load(path, mmap_mode="r", allow_pickle=False)
    with warnings.catch_warnings():  # read-only on purpose: nothing writes a captured stage
        warnings.simplefilter("ignore", UserWarning)
        tensor = torch.from_numpy(memory_map)
    setattr(tensor, _MAP, memory_map)
    return tensor


def as_numpy(tensor: torch.Tensor) -> np.ndarray:
    """A stage as numpy: a spilled one as its memory map itself (so that `release` finds it from
    any view), any other as float32 on the CPU."""
    memory_map = getattr(tensor, _MAP, None)
    return memory_map if memory_map is not None else tensor.detach().cpu().float().numpy()


def release(*values: Any) -> None:
    """Drop the pages a pass read from every spilled tensor among `values` (tensors, or objects
    with a `stages` dict such as a Capture); they are read from the page cache again if needed."""
    for value in values:
        stages = getattr(value, "stages", None)
        tensors = stages.values() if isinstance(stages, dict) else [value]
        for tensor in tensors:
            memory_map = getattr(tensor, _MAP, None) if isinstance(tensor, torch.Tensor) else _memory_map_of(tensor)
            mapped = getattr(memory_map, "_mmap", None)  # numpy's own mmap.mmap of the file, None once closed
            if mapped is not None:
                mapped.madvise(mmap.MADV_DONTNEED)


def _memory_map_of(array: Any) -> np.memmap | None:
    """The memory map a numpy array (a view of a spilled stage) reads from, if any."""
    while isinstance(array, np.ndarray):
        if isinstance(array, np.memmap):
            return array
        array = array.base
    return getattr(array, _MAP, None) if isinstance(array, torch.Tensor) else None  # Tensor.numpy()'s base


def releasing(function: Function) -> Function:
    """Release what a pass over spilled stages read, once the pass is done."""

    @functools.wraps(function)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return function(*args, **kwargs)
        finally:
            release(*args, *kwargs.values())

    return wrapper  # type: ignore[return-value]
