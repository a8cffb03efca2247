"""Induction/copy: a random sequence of distinct tokens, then its repeat."""

from __future__ import annotations

import torch

from attnlab.errors import UserError
from attnlab.training.settings import TrainingConf
from attnlab.training.tasks.task_base import Batch, Task


class Induction(Task):
    """A random sequence of distinct tokens, then its repeat: from the repeat's second token on, the
    next token is the one that followed the current token's first occurrence."""

    def __init__(self, vocab: int, context_length: int) -> None:
        self.vocab, self.context_length = vocab, context_length
        self.half = (context_length + 2) // 2  # the repeat covers inputs and the last target

    def batch(self, size: int, generator: torch.Generator, split: str = "train") -> Batch:
        T = self.context_length
        first = torch.rand(size, self.vocab, generator=generator).argsort(dim=1)[:, :self.half]  # (B, half)
        sequence = torch.cat([first, first], dim=1)[:, :T + 1]  # (B, T + 1)
        scored = torch.zeros(size, T, dtype=torch.bool)
        scored[:, self.half:] = True  # the current token was seen before: its follower is known
        return Batch(sequence[:, :-1], sequence[:, 1:], scored)


def make(settings: TrainingConf) -> Induction:
    T = settings.model.context_length
    half = (T + 2) // 2
    if settings.vocab < half:
        raise UserError(f"training.vocab={settings.vocab}: the induction task needs at least {half} tokens "
                        f"(half of context_length={T}, drawn without repeats)")
    return Induction(settings.vocab, T)
