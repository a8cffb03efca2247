"""The in-process guard of a job: `sys.exit` and a `KeyboardInterrupt` that is not the user's Ctrl-C
(a module raised it) become the job's failed record; the user's own Ctrl-C, told apart by a
SIGINT handler, still stops everything. attnlab.app.isolation runs it in this process or in a
job worker (attnlab.app.job_worker)."""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

Work = Callable[[], list[str]]  # a job's work: returns its failed records' paths
Failure = Callable[[str], str]  # writes a failed record with this one-line cause; returns its path


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


def guarded(work: Work, fail: Failure) -> list[str]:
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
