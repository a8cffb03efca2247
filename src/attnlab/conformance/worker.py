"""A survey worker: `python -m attnlab.conformance.worker FOLDER TYPE...`: its types in order, each
marked started before and written as a row after, so the runner sees which one a hang or a crash
of the interpreter took."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

from attnlab.conformance.store import done, mark_started, write_row
from attnlab.conformance.survey import Row, survey_one


def main(argv: list[str], survey: Callable[[str], Row] = survey_one) -> None:
    """`survey`: how one type is surveyed (the variant survey's, or the whole-model survey's)."""
    folder, types = Path(argv[0]), argv[1:]
    finished = done(folder)
    for model_type in types:
        if model_type in finished:
            continue
        mark_started(folder, model_type)
        write_row(folder, survey(model_type))


if __name__ == "__main__":
    main(sys.argv[1:])
