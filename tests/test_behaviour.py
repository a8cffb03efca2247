"""Behaviour unchanged: every built-in variant, at the book's inputs and at 8 random
tokens x 8 features x 2 heads, gives the status, first divergent stage, findings and output values
recorded in tests/golden/behaviour.json from the main before the redesign."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from tests.golden.make_behaviour import behaviour

EXPECTED = json.loads((Path(__file__).parent / "golden" / "behaviour.json").read_text())


@pytest.mark.parametrize("case", sorted(EXPECTED))
def test_a_built_in_gives_what_it_gave_before(case: str) -> None:
    variant, size = case.split("@")
    before, after = EXPECTED[case], behaviour(variant, size)
    assert (after["status"], after["first_divergent_stage"], after["findings"]) == (
        before["status"], before["first_divergent_stage"], before["findings"])
    if before["output"] is None:
        assert after["output"] is None
    else:
        np.testing.assert_allclose(after["output"], before["output"], rtol=1e-6, atol=1e-7)
