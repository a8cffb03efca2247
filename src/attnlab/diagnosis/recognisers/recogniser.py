"""What every recogniser shares: the check that runs it on enough tokens, one (batch item, head)
at a time, and float32's rounding."""

from __future__ import annotations

import functools
import itertools
from collections.abc import Callable, Iterator

import torch

from attnlab.diagnosis.context import Check, Context, Found, Pair
from attnlab.record import Finding

EPS = float(torch.finfo(torch.float32).eps)


UNIT_RMS = 1e-3  # |RMS - 1| a normalised vector may show (the norm's eps, float32 rounding)


def recogniser(recognise: Callable[[Pair], list[Finding]]) -> Check:
    """A check that names a change read from the variant and the reference, on enough tokens to
    tell it from a bug."""

    @functools.wraps(recognise)
    def check(ctx: Context, found: Found) -> list[Finding]:
        return recognise(ctx.pair) if ctx.pair.fits else []

    return check


def each_head(t: torch.Tensor) -> Iterator[tuple[int, int]]:
    """Every (batch item, head) of a (batch, heads, ...) stage: (query x key) work one head at a time."""
    return itertools.product(range(t.shape[0]), range(t.shape[1]))


ROWS = 256  # rows of one head's matrix taken at a time, so the temporaries stay small at any length
