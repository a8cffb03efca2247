"""What a model is given: token ids as a list or a file (the same run as the text they encode),
and a text of any characters through the Python API, taken literally."""

from __future__ import annotations

import numpy as np
import pytest

import attnlab
from attnlab.errors import UserError
from attnlab.inputs.text import gpt2_encoding
from tests.model.conftest import TEXT

QUIET = ["log.tensorboard=false", "log.html=false", "log.table=false"]
LITERAL = "Every effort, moves; you 'a' \"b\" = {c} 100% ${seed} forward"


def _observed(folder, inputs: dict) -> attnlab.Result:
    return attnlab.run(overrides=[f"model.path={folder}", "layer=1", "intervene=observe", *QUIET], inputs=inputs)


def test_token_ids_as_a_list_or_a_file_run_as_the_text_they_encode(tiny_gpt2, tmp_path) -> None:
    ids = gpt2_encoding().encode(TEXT)
    (tmp_path / "ids.txt").write_text("\n".join(map(str, ids)))
    by_text = _observed(tiny_gpt2, {"kind": "text", "text": TEXT}).record
    for given in (ids, str(tmp_path / "ids.txt")):
        by_ids = _observed(tiny_gpt2, {"kind": "ids", "ids": given}).record
        assert by_ids.status == "ok" and by_ids.labels == by_text.labels
        np.testing.assert_array_equal(by_ids.reference_stages["weights"], by_text.reference_stages["weights"])


def test_an_id_past_the_vocabulary_is_one_line(tiny_gpt2) -> None:
    with pytest.raises(UserError, match=r"^inputs.ids has token id 60000; the model's vocabulary has 50257 rows"):
        _observed(tiny_gpt2, {"kind": "ids", "ids": [1, 60000]})


def test_a_text_of_any_characters_is_taken_literally_through_the_python_api(tiny_gpt2) -> None:
    record = _observed(tiny_gpt2, {"kind": "text", "text": LITERAL}).record
    encoding = gpt2_encoding()
    assert record.status == "ok" and record.config["inputs"]["text"] == LITERAL
    assert len(record.labels) == len(encoding.encode(LITERAL))
