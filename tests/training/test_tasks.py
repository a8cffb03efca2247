"""Training tasks are a registry (attnlab.training.tasks.TASKS): a task of one's own is one function
in it, checked and trained as the built-in ones are, and its name is offered where a wrong one is refused."""

from __future__ import annotations

import pytest
import torch

from attnlab.errors import UserError
from attnlab.training.job import plan
from attnlab.training.settings import TrainingConf
from attnlab.training.tasks import TASKS, Batch, Task, make_task
from tests.training._tiny import tiny


class Previous(Task):
    """Each target is the token two back: known from the third position on."""

    def __init__(self, vocab: int, context_length: int) -> None:
        self.vocab, self.context_length = vocab, context_length

    def batch(self, size: int, generator: torch.Generator, split: str = "train") -> Batch:
        T = self.context_length
        sequence = torch.randint(0, self.vocab, (size, T + 1), generator=generator)  # (B, T + 1)
        targets = torch.cat([sequence[:, :2], sequence[:, :-2]], dim=1)[:, 1:]  # (B, T): the token two back
        scored = torch.zeros(size, T, dtype=torch.bool)
        scored[:, 2:] = True
        return Batch(sequence[:, :-1], targets, scored)


def make(settings: TrainingConf) -> Previous:
    return Previous(settings.vocab, settings.model.context_length)


def test_the_built_in_tasks_are_registered_by_name() -> None:
    assert list(TASKS) == ["induction", "mqar", "text"]
    assert type(make_task(tiny(task="mqar", pairs=2))).__name__ == "MultiQueryRecall"


def test_a_task_of_one_s_own_is_one_line_in_the_registry(monkeypatch) -> None:
    monkeypatch.setitem(TASKS, "previous", make)
    planned = plan("reference", tiny(task="previous"))
    assert isinstance(planned.task, Previous)
    unknown = r"^training.task=sorting: unknown task; allowed are induction, mqar, text, previous$"
    with pytest.raises(UserError, match=unknown):
        plan("reference", tiny(task="sorting"))


def test_each_task_checks_the_settings_it_reads_in_one_line() -> None:
    with pytest.raises(UserError, match=r"^training.path=null: the text task needs a text file; training.path=FILE$"):
        make_task(tiny(task="text"))
    with pytest.raises(UserError, match=r"mqar needs context_length >= 4 \* pairs \(context_length=8\)$"):
        make_task(tiny(task="mqar", pairs=3))
    with pytest.raises(UserError, match=r"the induction task needs at least 5 tokens"):
        make_task(tiny(vocab=4))
