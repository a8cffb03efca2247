"""Records written before the record became a package still load, field for field."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from attnlab.record import read_record

FIXTURES = Path(__file__).parent / "fixtures"
# written by attnlab.run at format 3: a single run, a variant in a model's layer, the learner's check
WRITTEN = ("format3_single.json", "format3_model_layer.json", "format3_model_check.json")


@pytest.mark.parametrize("name", WRITTEN)
def test_a_record_written_at_format_3_loads_and_writes_back_the_same_json(name: str) -> None:
    data = json.loads((FIXTURES / name).read_text())
    assert read_record(FIXTURES / name).to_json_dict() == data
