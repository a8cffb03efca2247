"""A sweep's job preempted under submitit (`hydra/launcher=submitit_slurm` or `submitit_local`):
submitit's signal (SIGUSR2) reaches the process that runs the job, and its handler calls the
launcher's `checkpoint` hook, which requeues the job, then exits. attnlab runs the job's work in a
job worker (attnlab.app.isolation), where a training job keeps its checkpoint: the signal is passed
to the worker as SIGTERM first, and submitit's handler runs once the worker has written its
checkpoint and ended, so the requeued job resumes from the step the signal came at."""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from multiprocessing.process import BaseProcess
from typing import Any

from attnlab.training.signals import submitit_signal

CHECKPOINT_GRACE_S = 60.0  # how long the worker may take to end its step and write its checkpoint


@contextmanager
def preemption_passed_to(worker: BaseProcess) -> Iterator[None]:
    """Around a job run in `worker`: submitit's signal becomes the worker's SIGTERM, then submitit's."""
    signum = submitit_signal() if threading.current_thread() is threading.main_thread() else None
    if signum is None:
        yield
        return
    submitits = signal.getsignal(signum)
    # submitit_signal names a signal only when submitit's handler (a bound method) is installed for it
    assert callable(submitits)
    pid = worker.pid
    assert pid is not None  # attnlab.app.isolation passes its job worker's process, started

    def passed_on(received: int, frame: Any) -> None:
        with suppress(OSError):
            os.kill(pid, signal.SIGTERM)
        worker.join(CHECKPOINT_GRACE_S)
        submitits(received, frame)

    signal.signal(signum, passed_on)
    try:
        yield
    finally:
        signal.signal(signum, submitits)
