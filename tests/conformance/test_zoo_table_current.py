"""The published conformance table is current against the code: a sample of its rows, surveyed again
in-process now, gives the outcome, class and error findings the table says. The sample is drawn from
the table itself (a few types of every outcome, picked by a hash of the type's name), so a change that
moves types from one outcome to another without a new survey fails here."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from attnlab.conformance.store import from_csv
from attnlab.conformance.survey import Row, survey_one

transformers = pytest.importorskip("transformers")

TABLE = Path(__file__).parents[2] / "docs" / "reference" / "zoo.csv"
PER_OUTCOME = 2
QUICK = 3.0  # seconds a type took in the survey: slower ones stay out of the sample


def _sample() -> list[Row]:
    rows, _ = from_csv(TABLE.read_text())
    by_outcome: dict[str, list[Row]] = {}
    for row in rows:
        if row.seconds <= QUICK and row.outcome not in ("crash", "timeout"):
            by_outcome.setdefault(row.outcome, []).append(row)
    return [row for group in by_outcome.values()
            for row in sorted(group, key=lambda r: hashlib.sha256(r.type.encode()).hexdigest())[:PER_OUTCOME]]


def _surveyed_release() -> str:
    return from_csv(TABLE.read_text())[1]


@pytest.mark.slow
@pytest.mark.skipif(transformers.__version__ != _surveyed_release(),
                    reason="the table surveys another transformers release than the installed one")
@pytest.mark.parametrize("published", _sample(), ids=lambda r: r.type)
def test_the_published_row_is_what_the_code_gives_now(published: Row) -> None:
    now = survey_one(published.type)
    assert (now.cls, now.outcome, now.errors) == (published.cls, published.outcome, published.errors), (
        f"docs/reference/zoo.csv is stale for {published.type}: the table says {published.outcome} "
        f"{published.errors or ''}, the code gives {now.outcome} {now.errors or ''} {now.message}; "
        "run benchmarks/zoo_survey.py")
