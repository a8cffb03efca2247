"""Passes over a captured stage: index blocks over a (batch, heads, query, key) stage (every pass
that needs a (query x key) temporary runs one (batch item, head) and BLOCK_ROWS query rows at a
time), and the stage's largest magnitude."""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from types import MappingProxyType
from typing import Iterator, Mapping

import torch

from attnlab.capture.recorder import Capture, max_abs_or_nan
from attnlab.capture.spill import releasing

BLOCK_ROWS = 1024


def row_blocks(n: int, block: int = BLOCK_ROWS) -> Iterator[slice]:
    for start in range(0, n, block):
        yield slice(start, min(start + block, n))


def blocks(t: torch.Tensor) -> Iterator[tuple]:
    """Index tuples covering `t`: every leading (batch, head) position, query rows in blocks."""
    if t.dim() < 2:
        yield (slice(None),)
        return
    for lead in itertools.product(*(range(n) for n in t.shape[:-2])):
        for rows in row_blocks(t.shape[-2]):
            yield (*lead, rows)


max_abs = releasing(max_abs_or_nan)  # max |t| without an |t| temporary (capture's, which needs it first)


@releasing
def finite_max_abs(t: torch.Tensor) -> float:
    """max |t| over the finite entries: a causal mask's -inf says nothing about the values' scale."""
    bound = max_abs(t)
    if not math.isfinite(bound):
        bound = max((max_abs_or_nan(t[i].nan_to_num(nan=0.0, posinf=0.0, neginf=0.0)) for i in blocks(t)
                     if t[i].numel()), default=0.0)
    return bound


@dataclass(frozen=True)
class Peaks:
    """max |t| of every stage of one capture, over all entries and over the finite ones: measured
    once per capture by whoever holds it and passed on (tolerances, divergences and checks read them)."""

    peak: Mapping[str, float]
    finite: Mapping[str, float]


def peaks(capture: Capture) -> Peaks:
    peak = {stage: max_abs(t) for stage, t in capture.stages.items()}
    finite = {stage: p if math.isfinite(p) else finite_max_abs(capture.stages[stage]) for stage, p in peak.items()}
    return Peaks(MappingProxyType(peak), MappingProxyType(finite))
