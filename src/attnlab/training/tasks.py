"""The tasks a model trains on: each draws (inputs, targets, scored) batches from a generator.

`scored` marks the positions whose target the task determines (the repeat of an induction
sequence, the value after a queried key in MQAR, every character of a text); loss and accuracy
are taken there only.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch
from torch import Tensor

from attnlab.errors import UserError
from attnlab.training.settings import TrainingConf


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


class Text(Task):
    """Character-level text from a file (nanoGPT's shakespeare_char): random windows, the first 90%
    of the text for training, the rest for evaluation."""

    def __init__(self, path: str, context_length: int) -> None:
        text = _read(path)
        chars = sorted(set(text))
        self.vocab, self.context_length = len(chars), context_length
        index = {c: i for i, c in enumerate(chars)}
        ids = torch.tensor([index[c] for c in text], dtype=torch.long)
        cut = int(0.9 * len(ids))
        self.splits = {"train": ids[:cut], "eval": ids[cut:]}
        shortest = min(len(v) for v in self.splits.values())
        if shortest < context_length + 1:
            raise UserError(f"training.path={path}: {len(text)} characters is too small for context_length="
                            f"{context_length}; its last 10% must hold a window of {context_length + 1}")

    def batch(self, size: int, generator: torch.Generator, split: str = "train") -> Batch:
        ids, T = self.splits[split], self.context_length
        starts = torch.randint(0, len(ids) - T, (size,), generator=generator)  # (B,)
        windows = torch.stack([ids[s:s + T + 1] for s in starts.tolist()])  # (B, T + 1)
        return Batch(windows[:, :-1], windows[:, 1:], torch.ones(size, T, dtype=torch.bool))


def _read(path: str) -> str:
    try:
        return Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise UserError(f"training.path={path}: cannot read it as UTF-8 text ({type(exc).__name__})") from None


def make_task(settings: TrainingConf) -> Task:
    """The task the settings name; its sizes checked (UserError) before any model is built."""
    T = settings.model.context_length
    if settings.task == "text":
        assert settings.path is not None  # check_settings: the text task names its file
        return Text(settings.path, T)
    if settings.task == "mqar":
        return MultiQueryRecall(settings.vocab, T, settings.pairs)
    half = (T + 2) // 2
    if settings.vocab < half:
        raise UserError(f"training.vocab={settings.vocab}: the induction task needs at least {half} tokens "
                        f"(half of context_length={T}, drawn without repeats)")
    return Induction(settings.vocab, T)
