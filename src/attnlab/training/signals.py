"""The signal a launcher's job is preempted with, read without torch: the job's parent process (a
joblib or submitit worker that only hands jobs to its job worker, attnlab.app.preemption) never
imports it."""

from __future__ import annotations

import os
import signal


def submitit_signal() -> int | None:
    """The signal submitit's preemption and time-out handler is installed for in this process
    (SIGUSR2 unless SUBMITIT_PREEMPT_SIGNAL names another), or None outside submitit's jobs."""
    name = os.environ.get("SUBMITIT_PREEMPT_SIGNAL", "USR2").upper().removeprefix("SIG")
    signum = getattr(signal, f"SIG{name}", None)
    if signum is None:
        return None
    handler = signal.getsignal(signum)
    owner = getattr(handler, "__self__", None)
    return signum if type(owner).__module__.startswith("submitit.") else None
