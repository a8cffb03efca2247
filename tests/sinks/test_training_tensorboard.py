"""Training's TensorBoard runs read back with TensorBoard's own EventAccumulator: runs named
TASK/VARIANT/seed=N, one reference per seed in a sweep, one pooled run with a margin chart per
measure and side, an HParams session per side."""

import json
from pathlib import Path

import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from tensorboard.plugins.custom_scalar import layout_pb2

from attnlab import train
from attnlab.app.api import prepared
from attnlab.app.job_settings import sink_settings, training_request
from attnlab.app.run_job import training_outputs
from attnlab.sinks.base import JobInfo, build_sinks
from attnlab.sinks.tensorboard import TensorBoardSink
from attnlab.training.config_job import training_job
from attnlab.training.sweep_table import pooled_sweep
from tests.training._tiny import TINY_OVERRIDES


def events(folder: Path) -> EventAccumulator:
    accumulator = EventAccumulator(str(folder), size_guidance={"images": 0, "scalars": 0})
    accumulator.Reload()
    return accumulator


def runs(base: Path) -> list[str]:
    """Every folder holding an event file, as TensorBoard names its runs."""
    return sorted(str(f.parent.relative_to(base)) for f in base.rglob("events.out.tfevents.*"))


def layout(run: EventAccumulator) -> layout_pb2.Layout:
    from tensorboard.util import tensor_util

    tensor = run.Tensors("custom_scalars__config__")[0].tensor_proto
    return layout_pb2.Layout.FromString(tensor_util.make_ndarray(tensor).item())


def hand_band(per_seed: list[list[float]]) -> list[tuple[float, float, float]]:
    bands = []
    for values in zip(*per_seed):
        mean = sum(values) / len(values)
        std = (sum((v - mean) ** 2 for v in values) / (len(values) - 1)) ** 0.5
        bands.append((mean, mean - std, mean + std))
    return bands


def test_a_jobs_runs_are_task_variant_seed_with_a_pooled_band_and_sessions(tmp_path):
    result = train("causal_mask_missing", "induction", seed=1, n_seeds=2, overrides=TINY_OVERRIDES, out_dir=tmp_path)
    base = tmp_path / "tensorboard"
    assert runs(base) == ["induction/causal_mask_missing", "induction/causal_mask_missing/seed=1",
                          "induction/causal_mask_missing/seed=2", "induction/reference", "induction/reference/seed=1",
                          "induction/reference/seed=2", "pooled"]
    saved = json.loads((tmp_path / "training.json").read_text())
    seed2 = events(base / "induction/causal_mask_missing/seed=2")
    assert [e.value for e in seed2.Scalars("train/loss")] == pytest.approx(saved["seeds"][1]["variant"]["losses"])
    assert [e.step for e in seed2.Scalars("heads/layer0/head1/induction")] == [0, 20, 40]
    assert [e.value for e in seed2.Scalars("heads/induction_max")] == pytest.approx(
        [p["induction_max"] for p in saved["seeds"][1]["variant"]["heads"]])
    assert [e.step for e in seed2.Images("heatmaps/layer0")] == [0, 20, 40]  # the step slider over the evaluations

    pooled = events(base / "pooled")
    assert {c.title for c in layout(pooled).category} == {
        f"{tag} (mean; band: mean ± std over seeds)"
        for tag in ("train/loss", "eval/causal_accuracy", "eval/teacher_forced_accuracy", "heads/induction_max")}
    loss = next(c for c in layout(pooled).category if c.title.startswith("train/loss"))
    assert [(c.title, c.margin.series[0].value, c.margin.series[0].lower, c.margin.series[0].upper) for c in loss.chart] == [
        (name, f"{name}/train/loss/mean", f"{name}/train/loss/lower", f"{name}/train/loss/upper")
        for name in ("induction/causal_mask_missing", "induction/reference")]  # shown last first: the reference first
    band = [(m.value, lo.value, up.value) for m, lo, up in zip(*(pooled.Scalars(f"induction/reference/train/loss/{k}")
                                                                  for k in ("mean", "lower", "upper")))]
    expected = hand_band([run["reference"]["losses"] for run in saved["seeds"]])
    assert [v for b in band for v in b] == pytest.approx([v for b in expected for v in b], rel=1e-5)

    session = events(base / "induction/causal_mask_missing")
    assert result.verdict[0].encode() in session.PluginTagToContent("hparams")["_hparams_/session_start_info"]
    causal = [run["variant"]["summary"]["causal_accuracy"] for run in saved["seeds"]]
    assert session.Scalars("pooled/causal_accuracy")[0].value == pytest.approx(sum(causal) / 2)


@pytest.mark.slow  # a sweep: four trainings, the fast tier's slowest test (test_a_jobs_runs_... keeps the pooled band there)
def test_a_sweeps_jobs_write_one_reference_per_seed_and_the_end_one_pooled_run(tmp_path):
    sweep = tmp_path / "sweep"
    for number, (variant, seed) in enumerate([(v, s) for v in ("unscaled", "scaled_by_dk") for s in (1, 2)]):
        cfg, _ = prepared(variant, seed, overrides=["training=induction", *TINY_OVERRIDES, "log.html=false"])
        (sweep / str(number)).mkdir(parents=True)
        training_job(training_request(cfg), sweep / str(number), sweep,
                     training_outputs(cfg, build_sinks(sink_settings(cfg)), JobInfo(sweep / str(number), sweep)))
    TensorBoardSink().write_training_sweep(pooled_sweep(sweep), sweep)
    base = sweep / "tensorboard"
    assert runs(base) == ["induction/reference", "induction/reference/seed=1", "induction/reference/seed=2",
                          "induction/scaled_by_dk", "induction/scaled_by_dk/seed=1", "induction/scaled_by_dk/seed=2",
                          "induction/unscaled", "induction/unscaled/seed=1", "induction/unscaled/seed=2", "pooled"]
    assert len(list((base / "induction/reference/seed=1").glob("events.*"))) == 1  # written once, by the job that trained it
    pooled = events(base / "pooled")
    loss = next(c for c in layout(pooled).category if c.title.startswith("train/loss"))
    assert [c.title for c in loss.chart] == ["induction/unscaled", "induction/scaled_by_dk", "induction/reference"]
    assert all(chart.HasField("margin") for category in layout(pooled).category for chart in category.chart)
    jobs = [json.loads((sweep / str(n) / "training.json").read_text())["seeds"][0] for n in (2, 3)]
    mean = [e.value for e in pooled.Scalars("induction/scaled_by_dk/eval/causal_accuracy/mean")]
    assert mean == pytest.approx([sum(v) / 2 for v in zip(*([e["causal_accuracy"] for e in job["variant"]["evals"]]
                                                               for job in jobs))], rel=1e-5)


@pytest.mark.slow
def test_a_real_tensorboard_at_the_runs_root_serves_the_bands(tmp_path):
    """`tensorboard --logdir runs` with a sweep's runs deep under it: the layout's margin charts and
    their data from the pooled run, through TensorBoard's HTTP data API."""
    import subprocess
    import sys
    import urllib.parse

    from tests.sinks.test_tensorboard import free_port, get_json, wait_for

    sweep = tmp_path / "runs" / "multirun" / "2026-12-07" / "01-43-36"
    for number, (variant, seed) in enumerate([(v, s) for v in ("unscaled", "causal_mask_missing") for s in (1, 2)]):
        cfg, _ = prepared(variant, seed, overrides=["training=induction", *TINY_OVERRIDES, "log.html=false", "log.images=false"])
        (sweep / str(number)).mkdir(parents=True)
        training_job(training_request(cfg), sweep / str(number), sweep,
                     training_outputs(cfg, build_sinks(sink_settings(cfg)), JobInfo(sweep / str(number), sweep)))
    TensorBoardSink().write_training_sweep(pooled_sweep(sweep), sweep)
    port = free_port()
    command = [sys.executable, "-m", "tensorboard.main", "--logdir", str(tmp_path / "runs"), "--host", "127.0.0.1",
               "--port", str(port), "--reload_interval", "1", "--load_fast", "false"]
    server = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    data = f"http://127.0.0.1:{port}/data"
    prefix = "multirun/2026-12-07/01-43-36/tensorboard"
    try:
        layout = wait_for(f"{data}/plugin/custom_scalars/layout", lambda found: bool(found.get("category")), server)
        runs = wait_for(f"{data}/runs", lambda names: f"{prefix}/pooled" in names, server)
        assert len(runs) <= 40  # TensorBoard selects every run when it opens
        assert sorted(name for name in runs if "/reference/seed=" in name) == [f"{prefix}/induction/reference/seed={s}"
                                                                              for s in (1, 2)]
        loss = next(c for c in layout["category"] if c["title"].startswith("train/loss"))
        assert [chart["title"] for chart in loss["chart"]] == ["induction/unscaled", "induction/causal_mask_missing",
                                                               "induction/reference"]
        series = loss["chart"][0]["margin"]["series"][0]
        query = urllib.parse.urlencode({"run": f"{prefix}/pooled", "tag": series["value"]})
        served = get_json(f"{data}/plugin/custom_scalars/scalars?{query}")
        assert served["regex_valid"]
        jobs = [json.loads((sweep / str(n) / "training.json").read_text())["seeds"][0]["variant"]["losses"] for n in (0, 1)]
        by_hand = [sum(v) / 2 for v in zip(*jobs)]
        assert [value for _, _, value in served["tag_to_events"][series["value"]]] == pytest.approx(by_hand, rel=1e-5)
        query = urllib.parse.urlencode({"run": f"{prefix}/pooled", "tag": series["upper"]})
        upper = get_json(f"{data}/plugin/scalars/scalars?{query}")
        assert [value for _, _, value in upper] == pytest.approx([b[2] for b in hand_band(jobs)], rel=1e-5)
        request = {"experimentName": "", "startIndex": 0, "sliceSize": 100, "colParams": [],
                   "allowedStatuses": ["STATUS_UNKNOWN", "STATUS_SUCCESS", "STATUS_FAILURE", "STATUS_RUNNING"]}
        groups = get_json(f"{data}/plugin/hparams/session_groups", request)["sessionGroups"]
        assert sorted(group["hparams"]["variant"] for group in groups) == ["causal_mask_missing", "reference", "unscaled"]
    finally:
        server.terminate()
        try:
            server.wait(timeout=10)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
