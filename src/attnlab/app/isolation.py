"""A job's work where what a module does to its process becomes that job's failed record.

Two guards. `guarded` runs the work in this process: `sys.exit` and a `KeyboardInterrupt` that is
not the user's Ctrl-C (a plugin raised it) become a failed record; the user's own Ctrl-C (told
apart by a SIGINT handler) still stops everything. `isolated` runs it in a child process of a
forkserver that has torch and attnlab's plugins imported: `os._exit`, a segfault and a hang past
`timeout_s` become a failed record too, and the sweep goes on.

Why a forkserver: a plain fork of a process whose torch has used its thread pool can hang the
child; spawn pays a fresh interpreter and torch's import for every job; a forkserver pays that
once per process, and for each job a fork and what a fresh process pays that a warm one does not
(its copy-on-write page faults, its caches filled again): everything a job imports is imported
by the forkserver first (attnlab.app.preload). A sweep (and a run with `timeout_s`) is isolated;
a single run is guarded in-process, where a fresh process would cost more than the run.
`attnlab.run` in a notebook runs in-process, unguarded, as before. Costs: `python
benchmarks/run.py --only isolation`, benchmarks/README.md.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import sys
import threading
from contextlib import contextmanager, suppress
from multiprocessing.connection import Connection
from typing import Any, Callable, Iterator

from omegaconf import DictConfig

from attnlab.errors import UserError

Work = Callable[[], list]  # a job's work: returns its failed records' paths
Failure = Callable[[str], str]  # writes a failed record with this one-line cause; returns its path
PRELOAD = ["torch", "attnlab.app.preload"]  # imported once by the forkserver, inherited by every job
ISOLATION_ENV = "ATTNLAB_ISOLATION"  # 0: jobs in this process (see run_job_guarded)
KILL_GRACE_S = 1.0  # after the user's Ctrl-C, how long a job's process may take to stop on its own


class UserInterrupt(KeyboardInterrupt):
    """The user's Ctrl-C (a SIGINT), as opposed to a KeyboardInterrupt a module raised."""


class Interrupts:
    """The SIGINT handler of `user_interrupts`: raises UserInterrupt, or, inside `held()`, when the
    block ends."""

    def __init__(self) -> None:
        self.holding = self.pending = False

    def __call__(self, signum: int, frame: Any) -> None:
        if not self.holding:
            raise UserInterrupt()
        self.pending = True

    @contextmanager
    def held(self) -> Iterator[None]:
        self.holding = True
        try:
            yield
        finally:
            self.holding = False
            if self.pending:
                self.pending = False
                raise UserInterrupt()


@contextmanager
def user_interrupts() -> Iterator[Interrupts]:
    """SIGINT raises UserInterrupt for the duration (main thread only: elsewhere nothing changes)."""
    interrupts = Interrupts()
    if threading.current_thread() is not threading.main_thread():
        yield interrupts
        return
    previous = signal.signal(signal.SIGINT, interrupts)
    try:
        yield interrupts
    finally:
        signal.signal(signal.SIGINT, previous)


def guarded(work: Work, fail: Failure) -> list:
    """`work()` in this process; `sys.exit` and a module's KeyboardInterrupt become a failed record."""
    with user_interrupts():
        try:
            return work()
        except UserInterrupt:
            raise
        except SystemExit as exc:
            return [fail(f"the job called sys.exit({exc.code!r}); a module must return its context, not exit")]
        except KeyboardInterrupt:
            return [fail("the job raised KeyboardInterrupt (not a Ctrl-C); a module must not raise it")]


def _child(work: Work, fail: Failure, conn: Connection) -> None:
    """A job's process: the outcome goes back over `conn` as ("ok", paths) or ("error", kind, text)."""
    _die_with_parent()
    try:
        outcome: tuple = ("ok", guarded(work, fail))
    except UserInterrupt:
        outcome = ("interrupted",)
    except UserError as exc:
        outcome = ("error", "user", str(exc))
    except Exception as exc:  # noqa: BLE001 - reported by the parent as this job's one-line error
        outcome = ("error", type(exc).__name__, str(exc))
    with suppress(OSError):  # an output closed under it (`| head`) is not the job's failure
        for stream in (sys.stdout, sys.stderr):  # what the job printed, before the parent moves on
            stream.flush()
    try:
        conn.send(outcome)
    except OSError:  # the parent is gone (a killed joblib worker): no one to tell
        pass
    os._exit(0)  # the outcome is sent: no interpreter teardown (a module's thread could hold the process)


def _die_with_parent() -> None:
    """On Linux, end this job when the forkserver ends (it does when the process that launched the
    job dies): a killed joblib worker's job is then missing and launched again, never a second
    writer of the same folder."""
    if not sys.platform.startswith("linux"):
        return
    import ctypes

    PR_SET_PDEATHSIG = 1
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


def isolated(work: Work, fail: Failure, timeout_s: float | None) -> list:
    """`work()` in a child process (see the module's docstring); the parent writes the failed record
    when the child dies or runs past `timeout_s` without reporting."""
    if multiprocessing.get_start_method(allow_none=True) not in (None, "fork", "spawn", "forkserver"):
        # a joblib worker names loky's own method, which the job's process is told to use and cannot find
        multiprocessing.set_start_method("forkserver", force=True)
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload([*PRELOAD, *main_package()])
    parent, child = context.Pipe(duplex=False)
    process = context.Process(target=_child, args=(work, fail, child), daemon=True)
    with user_interrupts() as interrupts:
        for stream in (sys.stdout, sys.stderr):  # what this process printed comes before the job's output
            stream.flush()  # a Ctrl-C here stops before the start, with no process to join
        try:
            with interrupts.held():  # one inside the start left a process that could be neither joined nor killed
                process.start()
            child.close()
            outcome = _wait(parent, timeout_s)
        except UserInterrupt:
            process.join(KILL_GRACE_S)  # it got the same SIGINT: let it stop on its own first
            raise
        finally:
            if process.is_alive():
                process.kill()
            process.join()
    if outcome == TIMED_OUT:
        return [fail(f"the job ran past timeout_s={timeout_s:g} and was stopped")]
    if outcome is None:
        return [fail(death_cause(process.exitcode))]
    if outcome[0] == "ok":
        return outcome[1]
    if outcome[0] == "interrupted":
        raise UserInterrupt()
    _, kind, text = outcome
    raise UserError(text) if kind == "user" else RuntimeError(f"{kind}: {text}")


TIMED_OUT = ("timed out",)


def main_package() -> list[str]:
    """The package of the module this process runs as `__main__` (a joblib worker runs loky's
    `...backend.popen_loky_posix`), which multiprocessing runs again as `__mp_main__` in every
    job's process: imported once by the forkserver, a job then runs only that module's own lines.
    Not the module itself: runpy warns when it finds it imported. A package's `__main__` (`python
    -m attnlab`) is never run again."""
    name = getattr(getattr(sys.modules["__main__"], "__spec__", None), "name", None) or ""
    package, _, module = name.rpartition(".")
    return [package] if package and module != "__main__" else []


def _wait(parent: Connection, timeout_s: float | None) -> tuple | None:
    """The child's outcome; TIMED_OUT, or None when it died without one."""
    if not parent.poll(timeout_s):
        return TIMED_OUT
    try:
        return parent.recv()
    except EOFError:  # the pipe closed without a word: the process died
        return None


def death_cause(exitcode: int | None) -> str:
    """One line for a job's process that ended without reporting."""
    if exitcode is not None and exitcode < 0:
        name = signal.Signals(-exitcode).name
        return f"the job's process died of {name} (a crash in native code, or killed)"
    return f"the job's process exited with code {exitcode} before reporting (os._exit in a module?)"


def run_job_guarded(work: Work, fail: Failure, cfg: DictConfig, *, isolate: bool) -> list:
    """The job `work` under the guard its run calls for (see the module's docstring).
    ATTNLAB_ISOLATION=0 keeps every job in this process: a debugger's breakpoint in a module works,
    and benchmarks/isolation.py measures what isolation costs against it."""
    if isolate and os.environ.get(ISOLATION_ENV, "1") != "0":
        return isolated(work, fail, cfg.timeout_s)
    return guarded(work, fail)
