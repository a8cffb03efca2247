"""Whether a batch item's result depends on the other items in its batch.

The source checks that row 2 of a batched computation equals the single computation for token 2;
here the same check runs one level up: each batch item alone, as a batch of one, against its
slice of the batched run, stage by stage. A module that reduces or normalises over the batch
axis, or takes keys from another item, gives an item a different result in company than alone.

Eval mode only (dropout would make every rerun differ). Items that are all equal (the book's
inputs stacked, as the source does) cannot reveal mixing: the check then says so instead of
passing silently.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace

import torch

from attnlab.capture.recorder import Capture
from attnlab.capture.stages import STAGES
from attnlab.diagnosis.diagnostics import stage_tolerance
from attnlab.diagnosis.masking import with_masks_as_neg_inf
from attnlab.diagnosis.stage_blocks import blocks, one_thread

NOT_CHECKED_EQUAL = "batch mixing not checked: the batch items are equal; use inputs=random"


@dataclass
class BatchMixing:
    """The first stage at which an item computed alone differs from its slice of the batch."""

    stage: str | None  # None: every item matches its slice at every stage
    items: list[int] = field(default_factory=list)  # the batch items that differ at `stage`
    max_abs_diff: float = 0.0
    not_checked: str | None = None  # why the check could not run (e.g. identical items)


def _gap(alone: torch.Tensor, together: torch.Tensor) -> float:
    """max |alone - together| in blocks; equal infinities (a shared mask) count as 0, and so does a
    NaN on either side: where a bug made NaN, kernels for one item and for several may spread it
    differently, which says nothing about mixing."""
    worst = 0.0
    for i in blocks(alone):
        gap = (alone[i] - together[i]).abs_().nan_to_num_(nan=0.0)  # inf - inf and NaN: 0; inf - x: inf
        worst = max(worst, float(gap.max())) if gap.numel() else worst
    return worst


def items_equal(items: torch.Tensor) -> bool:
    return all(torch.equal(items[0], items[i]) for i in range(1, items.shape[0]))


def check(run_alone: Callable[[torch.Tensor], Capture], items: torch.Tensor, together: Capture) -> BatchMixing:
    """Run each of `items` (batch, n_tokens, d_in) alone with `run_alone(item[None])` and compare
    every stage with its slice of `together` (the capture of the batched run).

    The output is compared first and the stages before it only when an item's output differs: a
    mixing that cancels out before the output is not reported (it changes no result)."""
    if items.dim() != 3 or items.shape[0] < 2:
        return BatchMixing(None)
    if items_equal(items):
        return BatchMixing(None, not_checked=NOT_CHECKED_EQUAL)
    n_items = items.shape[0]
    if all(_first_mixed(["output"], [run_alone(items[i:i + 1])], _item(together, i), 1).stage is None
           for i in range(n_items)):  # one item's run held at a time
        return BatchMixing(None)  # every item's output is its own: the stages before it are not walked
    # only now is every stage of each kept, and compared with a mask's fill as no difference
    alone = [with_masks_as_neg_inf(run_alone(items[i:i + 1])) for i in range(n_items)]
    return _first_mixed(STAGES, alone, with_masks_as_neg_inf(together), n_items)


def _item(together: Capture, i: int) -> Capture:
    """Batch item i of the batched capture, as a batch of one."""
    return replace(together, stages={name: t[i:i + 1] for name, t in together.stages.items()})


@one_thread()
def _first_mixed(stages: Iterable[str], alone: list[Capture], together: Capture, n_items: int) -> BatchMixing:
    for stage in stages:
        mine = together.stages.get(stage)
        if mine is None or mine.shape[0] != n_items:
            continue
        differing, worst = [], 0.0
        for i, single in enumerate(alone):
            theirs = single.stages.get(stage)
            if theirs is None or theirs.shape[1:] != mine.shape[1:]:
                continue
            gap = _gap(theirs, mine[i:i + 1])
            if gap > stage_tolerance(stage, single):  # a NaN tolerance (NaN values): not comparable
                differing.append(i)
                worst = max(worst, gap)
        if differing:
            return BatchMixing(stage, differing, worst)
    return BatchMixing(None)
