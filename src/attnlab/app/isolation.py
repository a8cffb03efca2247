"""A job's work where what a module does to its process becomes that job's failed record.

`guarded` (attnlab.app.guard) runs it in this process: `sys.exit` and a module's
`KeyboardInterrupt` become a failed record. `isolated` runs it in a job worker
(attnlab.app.job_worker): `os._exit`, a segfault and a hang past `timeout_s` become a failed
record too, and the sweep goes on. A sweep (and a run with `timeout_s`) is isolated; a single run
is guarded in-process, where a fresh process would cost more than the run; `attnlab.run` in a
notebook runs in-process, unguarded.
"""

from __future__ import annotations

import os
import signal
import sys

from omegaconf import DictConfig

from attnlab.app.guard import Failure, UserInterrupt, Work, guarded, user_interrupts
from attnlab.app.job_outcome import Interrupted, Raised, Ran, TimedOut
from attnlab.app.job_worker import ISOLATION_ENV, worker_of_this_process
from attnlab.app.preemption import preemption_passed_to
from attnlab.errors import UserError

KILL_GRACE_S = 1.0  # after the user's Ctrl-C, how long a job's process may take to stop on its own


def isolated(work: Work, fail: Failure, timeout_s: float | None) -> list[str]:
    """`work()` in this process's job worker (see the module's docstring); the parent writes the
    failed record when the worker dies or runs past `timeout_s` without reporting."""
    worker = None
    with user_interrupts() as interrupts:
        try:
            for stream in (sys.stdout, sys.stderr):  # what this process printed comes before the job's output
                stream.flush()  # a Ctrl-C here stops before the start, with no process to stop
            with interrupts.held():  # one inside the start left a process that could be neither joined nor killed
                worker = worker_of_this_process()
            with preemption_passed_to(worker.process):  # under submitit (attnlab.app.preemption)
                outcome = worker.run(work, fail, timeout_s)
        except UserInterrupt:
            if worker is not None:
                worker.stop(KILL_GRACE_S)  # it got the same SIGINT: let it stop on its own first
            raise
        timed_out = isinstance(outcome, TimedOut)
        if outcome is None or timed_out or worker.retiring:  # a retiring worker ends itself
            worker.stop(0.0 if timed_out else KILL_GRACE_S)
    match outcome:
        case TimedOut():
            return [fail(f"the job ran past timeout_s={timeout_s:g} and was stopped")]
        case None:
            return [fail(death_cause(worker.process.exitcode, worker.crash))]
        case Ran(failed):
            return failed
        case Interrupted():
            raise UserInterrupt()
        case Raised(kind, text):
            raise UserError(text) if kind == "user" else RuntimeError(f"{kind}: {text}")


def death_cause(exitcode: int | None, site: str = "") -> str:
    """One line for a job's process that ended without reporting; `site`: where it crashed."""
    if exitcode is not None and exitcode < 0:
        name = signal.Signals(-exitcode).name
        return f"the job's process died of {name} " + (site or "(a crash in native code, or killed)")
    return f"the job's process exited with code {exitcode} before reporting (os._exit in a module?)"


def run_job_guarded(work: Work, fail: Failure, cfg: DictConfig, *, isolate: bool) -> list[str]:
    """The job `work` under the guard its run calls for (see the module's docstring).
    ATTNLAB_ISOLATION=0 keeps every job in this process: a debugger's breakpoint in a module works,
    and benchmarks/isolation.py measures what isolation costs against it."""
    if isolate and os.environ.get(ISOLATION_ENV, "1") != "0":
        return isolated(work, fail, cfg.timeout_s)
    return guarded(work, fail)
