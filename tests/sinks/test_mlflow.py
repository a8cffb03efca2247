"""The MLflow sink: runs written through the real CLI and read back with mlflow's own client."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from attnlab.errors import UserError
from attnlab.sinks.mlflow import INSTALL_HINT, MlflowSink, store_uri

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


@pytest.fixture
def client(monkeypatch):
    """MLflow's own client as a user gets it in a folder: no tracking URI, no variable set."""

    def in_folder(folder: Path):
        from mlflow import MlflowClient

        monkeypatch.chdir(folder)
        for name in ("MLFLOW_TRACKING_URI", "MLFLOW_ALLOW_FILE_STORE"):
            monkeypatch.delenv(name, raising=False)
        return MlflowClient()

    return in_folder


def artifact_bytes(mlflow_client, run_id: str, path: str, tmp_path: Path) -> bytes:
    local = mlflow_client.download_artifacts(run_id, path, str(tmp_path))
    return Path(local).read_bytes()


def test_without_mlflow_the_sink_is_a_one_line_error_naming_the_extra(monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "mlflow", None)  # `import mlflow` raises ImportError
    with pytest.raises(UserError) as caught:
        MlflowSink()
    assert str(caught.value) == INSTALL_HINT
    assert "pip install 'attnlab[mlflow]'" in INSTALL_HINT


def test_the_store_is_mlflows_default_in_the_working_folder_unless_named(monkeypatch, tmp_path) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    assert store_uri(None) == f"sqlite:///{(tmp_path / 'mlflow.db').resolve()}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "sqlite:///elsewhere.db")
    assert store_uri(None) == "sqlite:///elsewhere.db"
    assert store_uri("http://tracker:5000") == "http://tracker:5000"


@pytest.mark.slow
def test_a_run_without_log_mlflow_imports_nothing_of_mlflow(tmp_path) -> None:
    code = (
        "import sys, attnlab\n"
        f"attnlab.run('unscaled', out_dir={str(tmp_path / 'out')!r})\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'mlflow'))\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path, check=True)
    assert proc.stdout.strip().splitlines()[-1] == "[]"
    assert (tmp_path / "out" / "record.json").exists() and not (tmp_path / "mlflow.db").exists()


@pytest.mark.slow
def test_log_mlflow_without_the_extra_is_one_line_through_the_cli(app, tmp_path) -> None:
    hide = tmp_path / "hide_mlflow"
    hide.mkdir()
    (hide / "sitecustomize.py").write_text("import sys\nsys.modules['mlflow'] = None\n")
    result = app("variant=unscaled", "log.mlflow=true", env={"PYTHONPATH": str(hide)})
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and INSTALL_HINT in lines[0], result.stderr
    assert not (result.out_dir / "record.json").exists()  # refused before any work


@pytest.mark.slow
def test_a_single_run_is_a_run_of_the_attnlab_experiment(app, tmp_path, client) -> None:
    result = app("variant=unscaled", "d_out=4", "log.mlflow=true", "log.terminal=false")
    assert result.returncode == 0, result.stderr
    record = result.record
    assert (tmp_path / "mlflow.db").exists()  # MLflow's default store; its artifacts go to ./mlruns, as MLflow puts them
    mlflow_client = client(tmp_path)
    experiment = mlflow_client.get_experiment_by_name("attnlab")
    assert experiment.tags["mlflow.experimentKind"] == "custom_model_development"  # not shown as GenAI
    (run,) = mlflow_client.search_runs([experiment.experiment_id])
    assert run.info.status == "FINISHED"
    assert run.info.run_name == "unscaled d_out=4 s123"  # the variant, the values given, the seed
    # where it went, said where the user looks (the store is MLflow's default here: plain `mlflow ui`)
    assert "mlflow: run 'unscaled d_out=4 s123' in experiment 'attnlab' (open it: mlflow ui)\n" in result.stdout
    note = run.data.tags["mlflow.note.content"]  # the run's description: the findings in sentences
    (finding,) = record["findings"]
    assert finding["message"] in note and "`scaling`" in note
    params = run.data.params
    assert params["variant"] == "unscaled" and params["seed"] == "123" and params["d_out"] == "4"
    assert params["n_tokens"] == "6" and params["inputs.kind"] == "book" and "log.mlflow" not in params
    (point,) = mlflow_client.get_metric_history(run.info.run_id, "divergence/context")
    assert point.step == 0 and point.value == pytest.approx(record["diagnostics"]["divergence_context"])
    assert run.data.tags["attnlab.first_divergent_stage"] == "scaled_scores"
    assert run.data.tags["attnlab.diagnosis.findings"] == "scaling"
    stored = artifact_bytes(mlflow_client, run.info.run_id, "record.json", tmp_path / "dl")
    assert json.loads(stored) == record
    heatmaps = {a.path for a in mlflow_client.list_artifacts(run.info.run_id, "heatmaps/difference")}
    assert "heatmaps/difference/weights.png" in heatmaps
    png = artifact_bytes(mlflow_client, run.info.run_id, "heatmaps/variant/weights.png", tmp_path / "dl2")
    assert png.startswith(PNG_SIGNATURE)
    page = artifact_bytes(mlflow_client, run.info.run_id, "report.html", tmp_path / "dl3")
    assert page == (result.out_dir / "report.html").read_bytes()
    import mlflow

    (row,) = mlflow.search_runs([experiment.experiment_id]).to_dict("records")  # the runs table's columns
    assert row["params.d_out"] == "4" and row["params.num_heads"] == "2"
    assert row["metrics.divergence/context"] == pytest.approx(record["diagnostics"]["divergence_context"])
    assert {f"metrics.{tag}" for tag in ("weights/entropy_mean", "scaling/observed")} <= set(row)


@pytest.mark.slow
def test_n_seeds_puts_each_seed_at_its_step_and_every_record_in_the_run(app, tmp_path, client) -> None:
    store = tmp_path / "elsewhere"
    store.mkdir()
    result = app("variant=unscaled", "n_seeds=3", "seed=5", "log.mlflow=true", "log.terminal=false",
                 "log.images=false", f"sink.mlflow.tracking_uri=sqlite:///{store / 'mlflow.db'}")
    assert result.returncode == 0, result.stderr
    assert not (tmp_path / "mlflow.db").exists()  # the store named instead
    mlflow_client = client(store)
    (run,) = mlflow_client.search_runs([mlflow_client.get_experiment_by_name("attnlab").experiment_id])
    history = mlflow_client.get_metric_history(run.info.run_id, "weights/entropy_mean")
    expected = {seed: json.loads((result.out_dir / f"seed-{seed}" / "record.json").read_text())
                ["diagnostics"]["weights_entropy_mean"] for seed in (5, 6, 7)}
    assert {m.step: m.value for m in history} == pytest.approx(expected)
    assert {a.path for a in mlflow_client.list_artifacts(run.info.run_id)} == {"seed-5", "seed-6", "seed-7", "report.html"}
    assert not mlflow_client.list_artifacts(run.info.run_id, "heatmaps")  # log.images=false


@pytest.mark.slow
def test_a_joblib_sweep_is_one_experiment_with_a_run_per_job_and_loses_none(app, tmp_path, client) -> None:
    sweep = tmp_path / "sweep"
    result = app("-m", "hydra/launcher=joblib", "hydra.launcher.n_jobs=2", f"hydra.sweep.dir={sweep}",
                 "variant=reference,unscaled,wrong_softmax_axis", "seed=1,2", "log.mlflow=true",
                 "log.terminal=false", "log.tensorboard=false", "log.images=false")
    assert result.returncode == 0, result.stderr
    mlflow_client = client(tmp_path)
    named = [e for e in mlflow_client.search_experiments() if e.name == "sweep"]
    assert len(named) == 1  # created once, whichever worker came first
    assert named[0].tags["mlflow.experimentKind"] == "custom_model_development"
    runs = mlflow_client.search_runs([named[0].experiment_id])
    jobs = sorted(str(p.parent.resolve()) for p in sweep.glob("*/record.json"))
    assert len(jobs) == 6 and sorted(r.data.tags["attnlab.job_dir"] for r in runs) == jobs
    assert {r.info.status for r in runs} == {"FINISHED"}
    assert sorted(r.info.run_name for r in runs) == sorted(
        f"{variant} s{seed}" for variant in ("reference", "unscaled", "wrong_softmax_axis") for seed in (1, 2))
    for run in runs:
        job_record = json.loads((Path(run.data.tags["attnlab.job_dir"]) / "record.json").read_text())
        assert run.data.params["variant"] == job_record["variant"]
        assert run.data.params["seed"] == str(job_record["seed"])
        assert run.data.metrics["divergence/context"] == pytest.approx(job_record["diagnostics"]["divergence_context"])
        assert {a.path for a in mlflow_client.list_artifacts(run.info.run_id)} >= {"record.json"}
    import mlflow

    found = mlflow.search_runs(search_all_experiments=True)  # the user's one-liner in that folder, no variable set
    assert len(found) == 6 and set(found["params.variant"]) == {"reference", "unscaled", "wrong_softmax_axis"}
