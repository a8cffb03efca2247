"""A whole-model survey worker: `python -m attnlab.conformance.model_worker FOLDER TYPE...`, as
attnlab.conformance.worker runs the variant survey's types, with attnlab.conformance.model_survey's."""

from __future__ import annotations

import sys

from attnlab.conformance.model_survey import survey_model
from attnlab.conformance.worker import main

if __name__ == "__main__":
    main(sys.argv[1:], survey_model)
