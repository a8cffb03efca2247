"""MQAR (Zoology): key-value pairs, then queried keys each followed by its value."""

from __future__ import annotations

import torch

from attnlab.errors import UserError
from attnlab.training.settings import TrainingConf
from attnlab.training.tasks.task_base import Batch, Task


class MultiQueryRecall(Task):
    """MQAR (Zoology): `pairs` key-value pairs, then queried keys each followed by its value; the
    value after a queried key is scored. Keys come from the vocabulary's lower half, values from its
    upper half."""

    def __init__(self, vocab: int, context_length: int, pairs: int) -> None:
        self.vocab, self.context_length, self.pairs = vocab, context_length, pairs

    def batch(self, size: int, generator: torch.Generator, split: str = "train") -> Batch:
        T, P, half = self.context_length, self.pairs, self.vocab // 2
        keys = torch.rand(size, half, generator=generator).argsort(dim=1)[:, :P]  # (B, P) distinct keys
        values = half + torch.randint(0, self.vocab - half, (size, P), generator=generator)  # (B, P)
        n_queries = (T + 1 - 2 * P + 1) // 2
        asked = torch.randint(0, P, (size, n_queries), generator=generator)  # (B, Q) which pair each query asks
        context = torch.stack([keys, values], dim=2).flatten(1)  # (B, 2P) k1 v1 k2 v2 ...
        queries = torch.stack([keys.gather(1, asked), values.gather(1, asked)], dim=2).flatten(1)  # (B, 2Q)
        sequence = torch.cat([context, queries], dim=1)[:, :T + 1]  # (B, T + 1)
        scored = torch.zeros(size, T, dtype=torch.bool)
        scored[:, 2 * P::2] = True  # inputs that are queried keys: their target is the value
        return Batch(sequence[:, :-1], sequence[:, 1:], scored)


def make(settings: TrainingConf) -> MultiQueryRecall:
    if 4 * settings.pairs > settings.model.context_length:
        raise UserError(f"training.pairs={settings.pairs}: mqar needs context_length >= 4 * pairs "
                        f"(context_length={settings.model.context_length})")
    return MultiQueryRecall(settings.vocab, settings.model.context_length, settings.pairs)
