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
        np.testing.assert_array_equal(by_ids.reference.stages["weights"], by_text.reference.stages["weights"])


def test_an_id_past_the_vocabulary_is_one_line(tiny_gpt2) -> None:
    with pytest.raises(UserError, match=r"^inputs.ids has token id 60000; the model's vocabulary has 50257 rows"):
        _observed(tiny_gpt2, {"kind": "ids", "ids": [1, 60000]})


def test_a_text_of_any_characters_is_taken_literally_through_the_python_api(tiny_gpt2) -> None:
    record = _observed(tiny_gpt2, {"kind": "text", "text": LITERAL}).record
    encoding = gpt2_encoding()
    assert record.status == "ok" and record.config["inputs"]["text"] == LITERAL
    assert len(record.labels) == len(encoding.encode(LITERAL))


def test_an_eager_in_memory_hugging_face_model_runs_with_its_cache_off() -> None:
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config(n_layer=2, n_head=4, n_embd=64, n_positions=64,
                                       attn_implementation="eager")).eval()
    assert model.config.use_cache
    result = attnlab.run("multi_head_attention", model=model, layer=1, inputs={"kind": "text", "text": TEXT},
                         overrides=QUIET)
    assert result.record.status == "ok", result.record.error
    assert result.record.model.effect.kl_mean < 1e-8  # the layer's own computation in its place


def test_a_model_run_on_another_device_is_refused_before_the_model_loads() -> None:
    with pytest.raises(UserError, match=r"^device=cuda: a run inside a model runs on the CPU for now; device=cpu$"):
        attnlab.run("multi_head_attention", device="cuda", overrides=["model=hf:no_such_type", *QUIET])


def test_a_language_model_without_text_is_refused_before_it_loads(tiny_gpt2, tmp_path) -> None:
    import shutil

    shutil.copy(tiny_gpt2 / "config.json", tmp_path / "config.json")  # no weights: loading would fail otherwise
    with pytest.raises(UserError, match=r"^model: a language model runs on text or token ids: .* \(got inputs=book\)$"):
        attnlab.run("multi_head_attention", overrides=[f"model.path={tmp_path}", *QUIET])
