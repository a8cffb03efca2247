"""An edit's head, the chosen layers and a patch's text are checked from the model's config and its
tokenizer before the model loads (attnlab.model.edit_checks): one line, no model built."""

from __future__ import annotations

import pytest

import attnlab
from attnlab.errors import UserError
from attnlab.model import model_job
from tests.model.conftest import TEXT

GPT2 = ["model=hf:gpt2", "model.n_layer=2", "model.n_head=4", "model.n_embd=64"]
LLAMA = ["model=hf:llama", "model.num_hidden_layers=3", "model.num_attention_heads=8", "model.num_key_value_heads=2",
         "model.hidden_size=64", "model.intermediate_size=128"]
QUIET = ["log.tensorboard=false", "log.html=false", "log.table=false"]


@pytest.fixture
def never_loaded(monkeypatch):
    def refused(*_args, **_kwargs):
        raise AssertionError("the model was loaded before the request was checked")
    monkeypatch.setattr(model_job, "load_models", refused)


@pytest.mark.parametrize("sizes, words, intervene, message", [
    (GPT2, ["layer=0"], {"name": "ablate_head", "head": 4}, "intervene.head=4: the model has 4 heads (0 to 3)"),
    (GPT2, ["layer=1"], {"name": "patch", "head": 9, "text": TEXT}, "intervene.head=9: the model has 4 heads (0 to 3)"),
    (LLAMA, ["layer=0"], {"name": "scale_scores", "head": 8, "factor": 0.5},
     "intervene.head=8: the model has 8 heads (0 to 7)"),
    (GPT2, ["layer=2"], {"name": "observe"}, "layer=2: the model has 2 layers (0 to 1)"),
    (LLAMA, ["layer=[0,3]"], {"name": "ablate_head", "head": 0}, "layer=3: the model has 3 layers (0 to 2)"),
    (GPT2, ["layer=0"], {"name": "patch", "head": 0, "text": "Every effort"},
     "intervene.text is 2 tokens (GPT-2 BPE (tiktoken)), inputs.text 14: a patch replaces position by position; "
     "give texts of as many tokens"),
    (GPT2, ["layer=0"], {"name": "ablate"},
     "intervene=ablate: unknown; allowed are observe, ablate_head, scale_scores, patch, function"),
])
def test_an_index_or_text_out_of_range_is_refused_before_the_model_loads(never_loaded, sizes, words, intervene,
                                                                          message) -> None:
    with pytest.raises(UserError) as raised:
        attnlab.run(overrides=[*sizes, "inputs=text", f"inputs.text='{TEXT}'", *words, *QUIET], intervene=intervene)
    assert str(raised.value) == message


def test_a_saved_models_config_gives_the_head_count(never_loaded, tiny_gpt2) -> None:
    with pytest.raises(UserError, match=r"^intervene.head=4: the model has 4 heads \(0 to 3\)$"):
        attnlab.run(overrides=[f"model.path={tiny_gpt2}", "inputs=text", f"inputs.text='{TEXT}'", *QUIET],
                    intervene={"name": "ablate_head", "head": 4})
