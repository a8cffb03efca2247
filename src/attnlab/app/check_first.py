"""A single run's request checked before Hydra writes anything: Hydra writes `.hydra/` (config,
hydra, overrides) into the run's folder before it calls the task, so a request refused by the
task's check had already rewritten an earlier run's `.hydra/` when `hydra.run.dir` named its
folder (it then said `training.steps=0` beside results trained for 200 steps). Hydra calls
`on_run_start` before it makes the folder: refused there, nothing is written. The task then builds
the sinks without checking again (attnlab.app.job_task.run_task). Sweeps check every job in
attnlab's sweeper, before the first job.

Hydra turns an Exception raised by a callback into a warning and goes on with the run: the
refusal crosses Hydra as `Refused` (not an Exception), and `refusals_raised` around Hydra's run
raises the error itself again, for the command line to report in one line."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig, open_dict, read_write


class Refused(BaseException):  # noqa: N818 - not an error of its own: it carries one past Hydra's callbacks
    def __init__(self, error: Exception) -> None:
        super().__init__(str(error))
        self.error = error


class CheckFirst(Callback):
    def on_run_start(self, config: DictConfig, **kwargs: Any) -> None:
        from attnlab.app.config_values import check_key
        from attnlab.app.run_job import check  # when a run starts: Hydra's plugin scan never pays it

        task_cfg = copy.deepcopy(config)  # what the task gets: the config without its `hydra` node
        with read_write(task_cfg), open_dict(task_cfg):
            del task_cfg["hydra"]
        try:
            check_key(task_cfg, "timeout_s")
            check(task_cfg)
        except Exception as exc:  # noqa: BLE001 - every error of the check, past Hydra's warning
            raise Refused(exc) from None


@contextmanager
def refusals_raised() -> Iterator[None]:
    """Around Hydra's run: a request `CheckFirst` refused raises its own error."""
    try:
        yield
    except Refused as refused:
        raise refused.error from None
