"""What a change does to the model's output: next-token distributions compared position by position.

A Hugging Face model's own logits are read (its logit scaling, softcapping and tied head as its
forward applies them); any other model's are made from its output head a chunk of positions at a
time and reduced at once (a GPT-2 vocabulary at 1,024 tokens would be 200 MB per forward if kept
whole). A position's KL is clamped at 0: float32 rounding can make it slightly negative, and the
most negative value clamped is kept (`kl_clamped`) so the rounding is said. Several
changed runs (one per compared layer) share one pass: the unmodified chunk's distribution is made
once and every changed run is compared with it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from attnlab.model.forward import Final
from attnlab.model.inputs import real_positions
from attnlab.model.sizes import LogitScaling
from attnlab.model.user_metric import UserMetric
from attnlab.record import Effect

CHUNK = 128  # positions per logits chunk
AS_GIVEN = LogitScaling()  # a head whose output is the logits


def log_probs(head: nn.Module, final: Final, item: int, start: int, stop: int,
              scaling: LogitScaling = AS_GIVEN) -> Tensor:
    """(c, vocab) log-probabilities of batch item `item` at positions start..stop: the model's own
    logits where it gave them, else its head's output scaled as its family declares its forward does."""
    if final.logits is not None:
        return F.log_softmax(final.logits[item, start:stop].double(), dim=-1)  # (c, vocab) float64: a KL sums vocab terms
    logits = scaling.apply(head(final.hidden[item, start:stop]).double())  # (c, vocab)
    return F.log_softmax(logits, dim=-1)  # (chunk, vocab)


@dataclass
class _Base:
    """One chunk of the unmodified run: its log-probabilities and what every comparison reads of them."""

    p: Tensor  # (c, vocab) log-probabilities
    probs: Tensor  # (c, vocab) p.exp()
    top1: Tensor  # (c,)
    rows: Tensor  # (scored,) the chunk's positions that have a next token in the text
    following: Tensor  # (scored,) that next token


@dataclass
class _Tally:
    """One changed run's sums over the chunks."""

    kl_sum: float = 0.0
    kl_max: float = 0.0
    kl_clamped: float = 0.0  # the most negative position KL rounding made, clamped to 0
    agree: int = 0
    nll: float = 0.0
    non_finite: int = 0

    def add(self, base: _Base, q: Tensor) -> None:
        """`q`: (c, vocab) the changed run's log-probabilities at the chunk's positions."""
        kl = torch.sub(base.p, q).mul_(base.probs).sum(dim=-1)  # (c,) one (c, vocab) temporary, not two
        self.kl_clamped = min(self.kl_clamped, float(kl.nan_to_num(0.0).min()))
        kl = kl.clamp_min(0.0)  # (c,) NaN stays NaN
        self.non_finite += int((~torch.isfinite(kl)).sum())  # a NaN or infinity in q makes its position's KL one
        self.kl_sum += float(kl.sum())
        self.kl_max = max(self.kl_max, float(kl.max()), key=lambda v: (math.isnan(v), v))  # a NaN stays
        self.agree += int((base.top1 == q.argmax(dim=-1)).sum())
        if base.rows.numel():
            self.nll -= float(q[base.rows, base.following].sum())


def _base_chunk(head: nn.Module, final: Final, targets: Tensor, item: int, start: int, stop: int,
                scaling: LogitScaling) -> _Base:
    """`final`: the unmodified run's; `targets`: (T,) batch item `item`'s text."""
    p = log_probs(head, final, item, start, stop, scaling)  # (c, vocab)
    scored = max(min(stop - start, targets.shape[0] - 1 - start), 0)  # the last position has no next token
    return _Base(p, p.exp(), p.argmax(dim=-1), torch.arange(scored), targets[start + 1:start + 1 + scored])


@torch.no_grad()
def output_effects(head: nn.Module, base: Final, changed: list[Final], ids: Tensor, *,
                   scaling: LogitScaling = AS_GIVEN, changed_head: nn.Module | None = None,
                   chunk: int = CHUNK, metric: UserMetric | None = None,
                   lengths: Sequence[int] | None = None) -> list[Effect]:
    """For each changed run: KL(model || changed) of the next-token distributions (mean and max
    over positions), the share of positions whose top-1 token agrees, the loss on the text (mean
    next-token cross entropy) without and with the change, how far the final hidden states moved,
    and how many positions' changed predictions are not finite (their KL is NaN); over every
    position of every batch item, and, with several items, each item's own (`batch_items`).
    `ids`: (B, T). `changed_head`: another model's own output head (the learner's check compares
    two models), else `head` makes both where a run has no logits of its own. `metric`: a measure of
    one's own, given each text's whole logits (attnlab.model.user_metric). `lengths`: a padded
    batch's texts' tokens: each item scored at its own positions only, its pads never."""
    lengths = list(lengths or [ids.shape[1]] * ids.shape[0])
    per_item = [_item_effects(head, base, changed, ids[item, :n], item, scaling, changed_head, chunk)
                for item, n in enumerate(lengths)]
    if metric is not None:
        per_item = [_measured(metric, effects, head, base, changed, ids[item, :n], item, scaling, changed_head)
                    for item, (effects, n) in enumerate(zip(per_item, lengths))]
    if len(set(lengths)) > 1:  # padded: each text's own count of positions, for the lines that show them
        per_item = [[replace(effect, positions=n) for effect in effects] for effects, n in zip(per_item, lengths)]
    if len(per_item) == 1:
        return per_item[0]
    return [_whole([effects[run] for effects in per_item], base, final, lengths)
            for run, final in enumerate(changed)]


def _item_effects(head: nn.Module, base: Final, changed: list[Final], targets: Tensor, item: int,
                  scaling: LogitScaling, changed_head: nn.Module | None, chunk: int) -> list[Effect]:
    """Each changed run's effect on batch item `item`; `targets`: (n,) its ids, its pads left out."""
    tallies, nll, n = [_Tally() for _ in changed], 0.0, targets.shape[0]
    for start in range(0, n, chunk):
        stop = min(start + chunk, n)
        unmodified = _base_chunk(head, base, targets, item, start, stop, scaling)
        if unmodified.rows.numel():
            nll -= float(unmodified.p[unmodified.rows, unmodified.following].sum())
        for tally, final in zip(tallies, changed):
            tally.add(unmodified, log_probs(changed_head or head, final, item, start, stop, scaling))  # (c, vocab)
    return [_summary(tally, nll, base.hidden[item, :n], final.hidden[item, :n]) for tally, final in zip(tallies, changed)]


def _measured(metric: UserMetric, effects: list[Effect], head: nn.Module, base: Final, changed: list[Final],
              targets: Tensor, item: int, scaling: LogitScaling, changed_head: nn.Module | None) -> list[Effect]:
    """Batch item `item`'s effects with `metric`'s value on its whole logits (T, vocab), made once for
    the unmodified run and once per changed run (only when a metric asks: a GPT-2 vocabulary at 1,024
    tokens is 200 MB)."""
    n = targets.shape[0]
    before = _logits(head, base, item, n, scaling)  # (n, vocab)
    return [replace(effect, metrics={metric.name: metric(before, _logits(changed_head or head, final, item, n, scaling),
                                                         targets)})
            for effect, final in zip(effects, changed)]


def _logits(head: nn.Module, final: Final, item: int, n: int, scaling: LogitScaling) -> Tensor:
    """(n, vocab) batch item `item`'s logits at its first n positions: the model's own, else its head's scaled output."""
    return final.logits[item, :n] if final.logits is not None else scaling.apply(head(final.hidden[item, :n]))


def _whole(items: list[Effect], base: Final, changed: Final, lengths: list[int]) -> Effect:
    """A batch's effect from its items': means of their means (each text counts once, whatever its
    length), the largest of their maxima, sums of their counts; the hidden states' divergence over
    every text's positions (a padded batch's pads left out)."""
    def mean(name: str) -> float:
        values: list[float] = [getattr(item, name) for item in items]
        return sum(values) / len(items)

    real = real_positions(lengths, base.hidden.shape[1])  # (B, T)
    difference = (changed.hidden - base.hidden).float()[real]  # (positions, d)
    return Effect(
        kl_mean=mean("kl_mean"),
        kl_max=max((item.kl_max for item in items), key=lambda v: (math.isnan(v), v)),
        kl_clamped=min(item.kl_clamped for item in items),
        top1_agreement=mean("top1_agreement"),
        loss=mean("loss"),
        loss_changed=mean("loss_changed"),
        hidden_divergence=float(difference.abs().max()),
        hidden_relative_divergence=float(difference.norm() / base.hidden.float()[real].norm().clamp_min(1e-30)),
        non_finite_positions=sum(item.non_finite_positions for item in items),
        batch_items=items,
        positions=sum(lengths) if len(set(lengths)) > 1 else None,
        metrics={name: sum((item.metrics or {})[name] for item in items) / len(items) for name in items[0].metrics}
        if items[0].metrics else None,
    )


def output_effect(head: nn.Module, base: Final, changed: Final, ids: Tensor, **options: Any) -> Effect:
    """output_effects for one changed run."""
    return output_effects(head, base, [changed], ids, **options)[0]


def _summary(tally: _Tally, nll: float, base: Tensor, changed: Tensor) -> Effect:
    """`base`, `changed`: (T, d) final hidden states."""
    n = base.shape[0]
    difference = (changed - base).float()  # (T, d)
    return Effect(
        kl_mean=tally.kl_sum / n,
        kl_max=tally.kl_max,
        kl_clamped=tally.kl_clamped,
        top1_agreement=tally.agree / n,
        loss=nll / (n - 1) if n > 1 else math.nan,
        loss_changed=tally.nll / (n - 1) if n > 1 else math.nan,
        hidden_divergence=float(difference.abs().max()),
        hidden_relative_divergence=float(difference.norm() / base.float().norm().clamp_min(1e-30)),
        non_finite_positions=tally.non_finite,
    )
