"""A training task's interface: a task draws (inputs, targets, scored) batches from a generator.

`scored` marks the positions whose target the task determines (the repeat of an induction
sequence, the value after a queried key in MQAR, every character of a text); loss and accuracy
are taken there only.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor


@dataclass
class Batch:
    inputs: Tensor  # (B, T) token ids
    targets: Tensor  # (B, T) the next token
    scored: Tensor  # (B, T) bool: where loss and accuracy are taken


class Task:
    vocab: int
    context_length: int

    def batch(self, size: int, generator: torch.Generator, split: str = "train") -> Batch:
        raise NotImplementedError
