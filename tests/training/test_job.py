"""A training job from Python, its files, and bad input refused before any work."""

import json

import pytest
import torch
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from attnlab import train
from attnlab.errors import UserError
from attnlab.training.job import plan
from tests.training._tiny import TINY_OVERRIDES, tiny


@pytest.mark.slow
def test_a_job_writes_scalars_at_the_training_steps(tmp_path):
    result = train("causal_mask_missing", "induction", seed=1, n_seeds=2, overrides=TINY_OVERRIDES, out_dir=tmp_path)
    assert [run["seed"] for run in result.seeds] == [1, 2]
    saved = json.loads((tmp_path / "training.json").read_text())
    assert saved["verdict"] == result.verdict and saved["classes"]["variant"].startswith(
        "MultiHeadAttention (mha_mask_missing)")
    events = EventAccumulator(str(tmp_path / "tensorboard" / "induction" / "causal_mask_missing" / "seed=2"))
    events.Reload()
    assert [e.step for e in events.Scalars("train/loss")] == list(range(1, 41))
    assert [e.step for e in events.Scalars("eval/causal_accuracy")] == [0, 20, 40]
    assert [e.step for e in events.Scalars("attention/layer0/head1/max_weight")] == [0, 40]
    losses = [e.value for e in events.Scalars("train/loss")]
    assert losses == pytest.approx(saved["seeds"][1]["variant"]["losses"])
    assert "clear of seed noise" in (tmp_path / "training_comparison.md").read_text()
    assert "Verdict" in (tmp_path / "training.html").read_text()


@pytest.mark.parametrize("changes,message", [
    ({"task": "sorting"}, "training.task=sorting: unknown task; allowed are induction, mqar, text"),
    ({"steps": 0}, "training.steps=0: must be a positive integer"),
    ({"lr": [1e-3, 0]}, r"training.lr=\[0.001, 0\]: must be a number > 0 or a list of them"),
    ({"task": "text", "path": "TINY"}, "is too small for context_length=8"),
])
def test_bad_input_is_one_line(tmp_path, changes, message):
    if changes.get("path") == "TINY":
        (tmp_path / "tiny.txt").write_text("abcdefgh" * 2)
        changes = {**changes, "path": str(tmp_path / "tiny.txt")}
    with pytest.raises(UserError, match=message.replace("(", r"\(")) as caught:
        plan("reference", tiny(**changes))
    assert "\n" not in str(caught.value)


def test_a_layer_that_changes_the_width_is_refused():
    with pytest.raises(UserError, match=r"variant=mha_wrapper: cannot train: .* returns \(1, 2, 32\) for \(1, 2, 16\)"):
        plan("mha_wrapper", tiny())


def test_a_variant_that_cannot_run_backward_is_refused(monkeypatch):
    from attnlab.modules.registry import get_variant

    def no_backward(self, x):
        return x.detach().sum() * torch.ones_like(x).requires_grad_(False)
    monkeypatch.setattr(get_variant("builtin:mha_unscaled").cls, "forward", no_backward)
    with pytest.raises(UserError, match="variant=unscaled: cannot train: .* fails forward or backward"):
        plan("unscaled", tiny())


def test_a_class_in_memory_trains_and_nothing_is_printed(capsys):
    from attnlab.modules.registry import get_variant

    class Mine(get_variant("builtin:multi_head_attention").cls):  # the book's MultiHeadAttention, the reference's class
        pass

    result = train(Mine, "induction", overrides=TINY_OVERRIDES)
    assert result.classes["variant"].startswith("Mine") and capsys.readouterr().out == ""
    first = result.seeds[0]
    assert first["variant"]["losses"] == pytest.approx(first["reference"]["losses"], rel=1e-4)  # the same computation
    table = result.table  # a DataFrame, a row per measure
    assert table.loc["causal accuracy at the end", "clear of seed noise"] == "one seed: not estimated"
    assert list(table.columns) == ["reference", "notebook:Mine", "clear of seed noise", "seeds to separate"]
    shown = repr(result)
    assert shown.startswith("TrainingResult(notebook:Mine against the reference, induction, 1 seed(s), 40 steps")
    assert "array" not in shown and "tensor" not in shown and len(shown.splitlines()) <= 1 + len(result.verdict)
    assert "<h2>Verdict</h2>" in result._repr_html_()


def test_no_positions_is_refused_for_a_forward_run():
    from attnlab import run

    with pytest.raises(UserError, match="variant=no_positions: a change of the model .* runs with training=") as caught:
        run("no_positions")
    assert "\n" not in str(caught.value)


@pytest.mark.slow
def test_mlflow_gets_every_scalar_at_its_training_step(tmp_path):
    from mlflow import MlflowClient

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    result = train("unscaled", "induction", overrides=[*TINY_OVERRIDES, "log.mlflow=true", f"sink.mlflow.tracking_uri={uri}",
                                                       "log.tensorboard=false", "log.html=false"], out_dir=tmp_path / "job")
    client = MlflowClient(uri)
    experiments = [e.experiment_id for e in client.search_experiments()]
    runs = {run.info.run_name: run.info.run_id for run in client.search_runs(experiments)}
    assert set(runs) == {"reference seed=123", "variant=unscaled seed=123"}
    losses = client.get_metric_history(runs["variant=unscaled seed=123"], "train.loss")
    assert sorted(m.step for m in losses) == list(range(1, 41))
    by_step = {m.step: m.value for m in losses}
    assert [by_step[step] for step in range(1, 41)] == pytest.approx(result.seeds[0]["variant"]["losses"])
    causal = client.get_metric_history(runs["reference seed=123"], "eval.causal_accuracy")
    assert sorted(m.step for m in causal) == [0, 20, 40]
