"""What a job worker reports of a job (attnlab.app.job_outcome): typed, and sent over a pipe."""

from __future__ import annotations

import pickle

from attnlab.app.job_outcome import Raised, Ran, Reply
from attnlab.app.job_worker import _outcome
from attnlab.errors import UserError


def _raises(exc: Exception):
    def work() -> list:
        raise exc

    return work


def test_a_job_that_ran_is_its_failed_records_and_one_that_raised_its_one_line() -> None:
    assert _outcome(lambda: ["a/record.json"], str) == Ran(["a/record.json"])
    assert _outcome(_raises(UserError("seed: must be >= 0")), str) == Raised("user", "seed: must be >= 0")
    assert _outcome(_raises(ValueError("bad")), str) == Raised("ValueError", "bad")


def test_a_reply_crosses_the_pipe_as_it_was_sent() -> None:
    reply = Reply(Raised("user", "seed: must be >= 0"), retiring=True)
    assert pickle.loads(pickle.dumps(reply)) == reply
