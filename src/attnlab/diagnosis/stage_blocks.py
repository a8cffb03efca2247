"""Passes over a captured stage: index blocks over a (batch, heads, query, key) stage (every pass
that needs a (query x key) temporary runs one (batch item, head) and BLOCK_ROWS query rows at a
time; one scratch tensor serves the blocks of a pass), and the stage's largest magnitude."""

from __future__ import annotations

import contextlib
import itertools
import math
import weakref
from collections.abc import Collection, Iterator, Mapping
from dataclasses import dataclass
from types import MappingProxyType

import torch

from attnlab.capture.recorder import Capture, max_abs_or_nan
from attnlab.capture.spill import releasing

BLOCK_ROWS = 1024


@contextlib.contextmanager
def one_thread() -> Iterator[None]:
    """Every torch op on one intra-op thread, restored after: the passes run op after op on one
    (batch item, head) block each, and an op that enters a parallel region waits for the other
    OpenMP threads to wake; on a shared machine that is a scheduler slice per op, many times the
    block's own work (benchmarks/README.md, the diagnosis's cost). Also a decorator."""
    before = torch.get_num_threads()
    if before != 1:
        torch.set_num_threads(1)
    try:
        yield
    finally:
        if before != 1:
            torch.set_num_threads(before)


def row_blocks(n: int, block: int = BLOCK_ROWS) -> Iterator[slice]:
    for start in range(0, n, block):
        yield slice(start, min(start + block, n))


def blocks(t: torch.Tensor, rows: int = BLOCK_ROWS) -> Iterator[tuple[int | slice, ...]]:
    """Index tuples covering `t`: every leading (batch, head) position, query rows in blocks of `rows`."""
    if t.dim() < 2:
        yield (slice(None),)
        return
    for lead in itertools.product(*(range(n) for n in t.shape[:-2])):
        for block in row_blocks(t.shape[-2], rows):
            yield (*lead, block)


def block_scratch(t: torch.Tensor, dtype: torch.dtype, rows: int = BLOCK_ROWS) -> torch.Tensor:
    """Room for one of t's blocks (of `rows` rows) in `dtype`: a pass that writes a temporary per
    block reuses it (a fresh temporary for each costs more than the arithmetic)."""
    return torch.empty(t.shape[-1] * min(t.shape[-2], rows) if t.dim() >= 2 else t.numel(), dtype=dtype)


def fitted(scratch: torch.Tensor, block: torch.Tensor) -> torch.Tensor:
    """block_scratch's room shaped as `block`."""
    return scratch[:block.numel()].view(block.shape)


_measured = releasing(max_abs_or_nan)  # max |t| without an |t| temporary (capture's, which needs it first)
_KNOWN_MAX_ABS: dict[int, float] = {}  # max |t| a pass over t already read off, by id while t lives


def remember_max_abs(t: torch.Tensor, value: float) -> None:
    """`value` is max_abs(t), read off by a pass that had t's blocks in hand (a captured stage, never
    written after): the next max_abs(t) is that, with no pass of its own."""
    _KNOWN_MAX_ABS[id(t)] = value
    weakref.finalize(t, _KNOWN_MAX_ABS.pop, id(t), None)


def max_abs(t: torch.Tensor) -> float:
    """max |t| (inf or NaN where t holds one), as remembered or in one pass."""
    known = _KNOWN_MAX_ABS.get(id(t))
    return _measured(t) if known is None else known


@releasing
def finite_max_abs(t: torch.Tensor) -> float:
    """max |t| over the finite entries: a causal mask's -inf says nothing about the values' scale."""
    bound = max_abs(t)
    if not math.isfinite(bound):  # only a float holds NaN or inf
        room = block_scratch(t, t.dtype)
        bound = max((max_abs_or_nan(torch.nan_to_num(t[i], nan=0.0, posinf=0.0, neginf=0.0, out=fitted(room, t[i])))
                     for i in blocks(t) if t[i].numel()), default=0.0)
    return bound


@dataclass(frozen=True)
class Peaks:
    """max |t| of every stage of one capture, over all entries and over the finite ones: measured
    once per capture by whoever holds it and passed on (tolerances, divergences and checks read them)."""

    peak: Mapping[str, float]
    finite: Mapping[str, float]


def peaks(capture: Capture, known: Peaks | None = None, same: Collection[str] = ()) -> Peaks:
    """The capture's Peaks; those of the stages in `same`, which hold the values of the capture
    `known` was measured on, taken from it."""
    peak = {stage: known.peak[stage] if known and stage in same else max_abs(t) for stage, t in capture.stages.items()}
    finite = {stage: known.finite[stage] if known and stage in same else
              p if math.isfinite(p) else finite_max_abs(capture.stages[stage]) for stage, p in peak.items()}
    return Peaks(MappingProxyType(peak), MappingProxyType(finite))
