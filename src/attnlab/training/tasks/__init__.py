"""The tasks a model trains on, one file each: a `Task` (attnlab.training.tasks.task_base) and its
`make(settings)`, which checks the settings it reads (a UserError of one line) and builds it.
`training.task=NAME` trains on TASKS[NAME]; adding a task is one file here and one line in TASKS.
"""

from __future__ import annotations

from collections.abc import Callable

from attnlab.errors import UserError
from attnlab.training.settings import TrainingConf
from attnlab.training.tasks import characters, induction, mqar
from attnlab.training.tasks.task_base import Batch, Task

# the registry: one line per task, `training.task=NAME` -> the function that builds it
TASKS: dict[str, Callable[[TrainingConf], Task]] = {
    "induction": induction.make,
    "mqar": mqar.make,
    "text": characters.make,
}


def make_task(settings: TrainingConf) -> Task:
    """The task the settings name; its sizes checked (UserError) before any model is built."""
    if settings.task not in TASKS:
        raise UserError(f"training.task={settings.task}: unknown task; allowed are {', '.join(TASKS)}")
    return TASKS[settings.task](settings)


__all__ = ["TASKS", "Batch", "Task", "make_task"]
