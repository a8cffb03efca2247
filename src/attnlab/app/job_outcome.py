"""What a job worker (attnlab.app.job_worker) reports of a job, and what its parent makes of the
silence: typed, since each crosses the worker's pipe or its wait and is read in attnlab.app.isolation.
Internal messages between two processes of one run, pickled; never written to disk."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Ran:
    """The job ran to its end; `failed`: its failed records' paths (none: every record ok)."""

    failed: list[str]


@dataclass(frozen=True)
class Interrupted:
    """The user's Ctrl-C stopped the job."""


@dataclass(frozen=True)
class Raised:
    """The job raised before its records: `kind` is "user" for a UserError (its text is the user's
    one line), else the exception's type name."""

    kind: str
    text: str


Outcome = Ran | Interrupted | Raised


@dataclass(frozen=True)
class Reply:
    """The worker's answer to a job: its outcome, and whether the worker ends after it (a job that
    did not end with every record ok, or that changed torch's defaults)."""

    outcome: Outcome
    retiring: bool


@dataclass(frozen=True)
class TimedOut:
    """No reply within the job's timeout_s."""
