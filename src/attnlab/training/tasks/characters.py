"""Character-level text from a file (nanoGPT's shakespeare_char)."""

from __future__ import annotations

from pathlib import Path

import torch

from attnlab.errors import UserError
from attnlab.training.settings import TrainingConf
from attnlab.training.tasks.task_base import Batch, Task


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


def make(settings: TrainingConf) -> Text:
    if not settings.path:
        raise UserError("training.path=null: the text task needs a text file; training.path=FILE")
    return Text(settings.path, settings.model.context_length)
