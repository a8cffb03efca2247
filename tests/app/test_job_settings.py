"""The composed config read once into typed, frozen settings (attnlab.app.job_settings): plain values,
the one-line errors of today, and nothing that still refers to the config."""

from __future__ import annotations

import dataclasses

import pytest

from attnlab.app.api import compose_config
from attnlab.app.job_settings import inputs_values, model_request, sink_settings, training_request
from attnlab.errors import UserError
from attnlab.sinks.base import build_sinks

TEXT = "Your journey starts with one step"


def test_a_model_request_holds_plain_values_and_cannot_be_changed() -> None:
    cfg = compose_config("reference", 5, ["model=hf:gpt2", "model.n_layer=3", "layer=[0,2]", "inputs=text",
                                          f"inputs.text='{TEXT}'", "intervene=ablate_head", "intervene.head=1"])
    request = model_request(cfg)
    assert request.layer == [0, 2] and type(request.layer) is list
    assert (request.seed, request.inputs.kind, request.inputs.text) == (5, "text", TEXT)
    assert (request.edit.kind, request.edit.head) == ("ablate_head", 1)
    assert request.model.kind == "hf" and request.reference_model is None
    assert request.config["seed"] == 5 and request.config["intervene"] == {"name": "ablate_head", "head": 1}
    with pytest.raises(dataclasses.FrozenInstanceError):
        request.seed = 6  # type: ignore[misc]


@pytest.mark.parametrize(("overrides", "message"), [
    (["model=hf:gpt2", "device=cuda"], "device=cuda: a run inside a model runs on the CPU for now; device=cpu"),
    (["model=hf:gpt2", "reference_model=hf:gpt2", "intervene=ablate_head", "intervene.head=0"],
     "intervene: edits one model's layers; the learner's check (reference_model=) compares two"),
])
def test_a_model_request_keeps_todays_one_line_errors(overrides, message) -> None:
    with pytest.raises(UserError) as raised:
        model_request(compose_config("reference", 1, [*overrides, "inputs=text", f"inputs.text='{TEXT}'"]))
    assert str(raised.value) == message


def test_the_sinks_are_the_enabled_ones_the_terminal_last() -> None:
    cfg = compose_config("reference", 1, ["log.terminal=true", "log.table=true", "log.html=false",
                                          "log.tensorboard=false", "log.mlflow=false"])
    settings = sink_settings(cfg)
    assert list(settings.configs) == ["table", "terminal"]
    assert settings.configs["table"]["_target_"] == "attnlab.sinks.table.TableSink"
    assert settings.log["terminal"] is True and settings.log["html"] is False


def test_a_sink_config_that_cannot_be_read_is_one_line(monkeypatch) -> None:
    monkeypatch.delenv("ATTNLAB_NO_SUCH_VARIABLE", raising=False)
    cfg = compose_config("reference", 1, ["log.terminal=false", "log.table=true", "log.html=false",
                                          "log.tensorboard=false", "log.mlflow=false",
                                          "+sink.table.folder=${oc.env:ATTNLAB_NO_SUCH_VARIABLE}"])
    with pytest.raises(UserError, match=r"^sink.table: cannot build attnlab.sinks.table.TableSink: "):
        build_sinks(sink_settings(cfg))


def test_inputs_are_plain_values_with_their_factory() -> None:
    values = inputs_values(compose_config("reference", 1, ["inputs=random", "inputs.n_tokens=4", "inputs.d_in=3"]))
    assert type(values) is dict
    assert (values["kind"], values["n_tokens"], values["d_in"]) == ("random", 4, 3)
    assert values["_target_"] == "attnlab.inputs.kinds.random_inputs"


def test_a_training_request_runs_seeds_seed_to_seed_plus_n_seeds() -> None:
    request = training_request(compose_config("reference", 7, ["training=induction", "n_seeds=3",
                                                               "training.steps=11"]))
    assert list(request.seeds) == [7, 8, 9]
    assert request.settings.steps == 11 and request.settings.task == "induction"
