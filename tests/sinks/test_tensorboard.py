"""The TensorBoard sink, read back from real event files and from a real TensorBoard server."""

from __future__ import annotations

import io
import json
import math
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from attnlab.record import Finding, Record, Side
from attnlab.reporting.heatmap import MAX_SIDE
from attnlab.reporting.metrics import flat_hparams, metric_name
from attnlab.reporting.sweep_plots import sweep_curves
from attnlab.sinks.tensorboard import SWEEP_RUN, TensorBoardSink, sweep_tag, write_tensorboard
from tests._sweep_helpers import layout_of, report_of, sweep_events, sweep_of_lengths, sweep_record
from tests._zoo_helpers import source_qkv

BOOK_TOKENS = ["Your", "journey", "starts", "with", "one", "step"]
BOOK_INPUTS = [[0.43, 0.15, 0.89], [0.55, 0.87, 0.66], [0.57, 0.85, 0.64],
               [0.22, 0.58, 0.33], [0.77, 0.25, 0.10], [0.05, 0.80, 0.55]]  # fmt: skip
TABLE = "| module | divergence_context |\n|---|---|\n| unscaled | 0.0123 |\n| reference | 0 |"
SEED, D_OUT = 123, 2


def attention_stages(x: torch.Tensor, scaled: bool) -> dict[str, np.ndarray]:
    """SelfAttention_v1's stages with the shared seeded weights; `scaled=False` is the bug."""
    W_query, W_key, W_value = source_qkv(SEED, x.shape[1], D_OUT)
    queries, keys, values = x @ W_query, x @ W_key, x @ W_value
    scores = queries @ keys.T
    scaled_scores = scores / keys.shape[-1] ** 0.5 if scaled else scores
    weights = torch.softmax(scaled_scores, dim=-1)
    stages = dict(inputs=x, queries=queries, keys=keys, values=values, scores=scores,
                  scaled_scores=scaled_scores, weights=weights, context=weights @ values)
    return {name: tensor.numpy().astype(np.float32) for name, tensor in stages.items()}


def own_diagnostics(stages: dict[str, np.ndarray]) -> dict[str, float]:
    weights = stages["weights"].astype(np.float64)
    entropy = -(weights * np.log(weights)).sum(axis=-1)
    return {
        "weights_row_sum_max_err": float(np.abs(weights.sum(axis=-1) - 1).max()),
        "weights_entropy_mean": float(entropy.mean()),
        "weights_first_token_mass": float("nan"),  # not computed: NaN must be skipped
        "scale_observed": float(np.median(stages["scaled_scores"] / stages["scores"])),
        "scale_expected": 1 / math.sqrt(D_OUT),
        "softmax_dim": -1.0,
        "non_finite_weights": float((~np.isfinite(weights)).sum()),
        "shape_ok_context": True,
        "mystery_metric": 7.0,
    }


def make_record(tokens: list[str], x: torch.Tensor, kind: str) -> Record:
    variant, reference = attention_stages(x, scaled=False), attention_stages(x, scaled=True)
    diagnostics = own_diagnostics(variant)
    for stage in ("scores", "scaled_scores", "weights", "context"):
        diagnostics[f"divergence_{stage}"] = float(np.abs(variant[stage] - reference[stage]).max())
    diagnostics["relative_divergence_context"] = diagnostics["divergence_context"] / float(
        np.abs(reference["context"]).max())
    reference_diagnostics = own_diagnostics(reference) | {"divergence_context": 0.0}
    n_tokens, d_in = x.shape
    config = {
        "variant": {"name": "unscaled", "params": {}},
        "seed": SEED,
        "d_out": D_OUT,
        "weights": "shared",
        "inputs": {"kind": kind, "n_tokens": n_tokens, "d_in": d_in, "path": None},
        "log": {"tensorboard": True, "images": True},
        "expect": {"context_shape": [n_tokens, D_OUT], "tolerance": np.float32(0.5), "strict": np.bool_(True)},
    }
    return Record(
        seed=SEED, config=config, labels=tokens, n_tokens=n_tokens, d_in=d_in, d_out=D_OUT,
        variant=Side("unscaled", variant, {k: list(v.shape) for k, v in variant.items()}, diagnostics=diagnostics),
        reference=Side("reference", reference, {k: list(v.shape) for k, v in reference.items()},
                       diagnostics=reference_diagnostics),
        first_divergent_stage="scaled_scores",
        findings=[Finding("scaling", "scaled_scores", "error", "The scores are not divided by sqrt(d_k).")],
    )  # fmt: skip


def book_record() -> Record:
    return make_record(BOOK_TOKENS, torch.tensor(BOOK_INPUTS), "book")


def random_record(n_tokens: int, d_in: int = 3) -> Record:
    generator = torch.Generator().manual_seed(7)
    x = torch.rand(n_tokens, d_in, generator=generator)
    return make_record([f"t{i}" for i in range(n_tokens)], x, "random")


def accumulate(job_dir: Path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    sizes = {"scalars": 0, "images": 0, "histograms": 0, "tensors": 0, "compressedHistograms": 0}
    return EventAccumulator(str(job_dir), size_guidance=sizes).Reload()


@pytest.fixture(scope="module")
def book_events(tmp_path_factory):
    job_dir = tmp_path_factory.mktemp("runs") / "0-variant=unscaled"
    record = book_record()
    write_tensorboard([record], job_dir, table_markdown=TABLE)
    return record, job_dir, accumulate(job_dir)


@pytest.fixture(scope="module")
def pooled_events(tmp_path_factory):
    job_dir = tmp_path_factory.mktemp("runs") / "600-tokens"
    write_tensorboard([random_record(600)], job_dir, table_markdown=TABLE)
    return accumulate(job_dir)


def text(events, tag: str) -> str:
    return events.Tensors(tag)[0].tensor_proto.string_val[0].decode()


def decoded_size(events, tag: str) -> tuple[int, int]:
    event = events.Images(tag)[0]
    image = Image.open(io.BytesIO(event.encoded_image_string))
    assert image.size == (event.width, event.height)
    return image.size


@pytest.mark.parametrize(("name", "tag"), [
    ("divergence_context", "divergence/context"),
    ("relative_divergence_scaled_scores", "relative_divergence/scaled_scores"),
    ("non_finite_weights", "non_finite/weights"),
    ("weights_row_sum_max_err", "weights/row_sum_max_err"),
    ("weights_entropy_norm_mean", "weights/entropy_norm_mean"),
    ("scale_observed", "scaling/observed"),
    ("softmax_dim", "softmax/dim"),
    ("batched_single_max_abs_diff", "batched_single/max_abs_diff"),
    ("shape_ok_context", "shape_ok/context"),
    ("something_new", "diagnostics/something_new"),
    ("weights_", "diagnostics/weights_"),
])  # fmt: skip
def test_scalar_tags_group_by_prefix(name, tag):
    assert metric_name(name) == tag


def test_one_run_per_job_with_the_event_file_in_the_job_folder(book_events):
    _, job_dir, _ = book_events
    assert len(list(job_dir.glob("events.out.tfevents.*"))) == 1
    assert {p.relative_to(job_dir).parts[0] for p in job_dir.rglob("*") if p.is_dir()} == {"heatmaps"}  # the PNGs


def test_scalars_are_every_numeric_diagnostic_under_grouped_tags(book_events):
    record, _, events = book_events
    tags = set(events.Tags()["scalars"])
    expected = {
        "divergence/scores", "divergence/scaled_scores", "divergence/weights", "divergence/context",
        "relative_divergence/context", "weights/row_sum_max_err", "weights/entropy_mean", "scaling/observed",
        "scaling/expected", "softmax/dim", "non_finite/weights", "shape_ok/context", "diagnostics/mystery_metric",
    }  # fmt: skip
    reference = {f"reference/{tag}" for tag in expected if not tag.startswith(("divergence/", "relative_"))}
    assert tags == expected | reference  # NaN skipped; the reference's divergence (0 by definition) not logged
    value = events.Scalars("divergence/context")[0]
    assert value.step == 0 and value.value == pytest.approx(record.variant.diagnostics["divergence_context"])
    assert events.Scalars("scaling/observed")[0].value == pytest.approx(1.0)
    assert events.Scalars("reference/scaling/observed")[0].value == pytest.approx(1 / math.sqrt(2), rel=1e-5)
    assert events.Scalars("shape_ok/context")[0].value == 1.0


def test_a_job_writes_no_custom_scalars_layout(book_events):
    """A job's scalars are one point each: a layout of them was clouds of dots shown before a
    sweep's curves; the sweep's curves are the only layout."""
    _, _, events = book_events
    assert "custom_scalars" not in events.PluginTagToContent.__self__._plugin_to_tag_to_content


def test_heatmaps_of_the_stages_that_differ_and_weights_and_context(book_events):
    """The unscaled variant's scores equal the reference's: no map of them (nothing there is read)."""
    _, _, events = book_events
    tags = set(events.Tags()["images"])
    stages = ("scaled_scores", "weights", "context")
    assert tags == {f"heatmaps/{source}/{stage}" for source in ("variant", "reference", "difference")
                    for stage in stages} | {f"heatmaps/{source}/weights_log" for source in ("variant", "reference")}
    sizes = {decoded_size(events, tag) for tag in tags}
    assert len(sizes) == 1  # one size per kind of card
    width, height = sizes.pop()
    assert 6 * 20 < width < 600 and 6 * 15 < height < 500


def test_heatmaps_above_256_tokens_are_pooled_with_a_crop(pooled_events):
    tags = set(pooled_events.Tags()["images"])
    assert {"heatmaps/variant/weights/crop64", "heatmaps/difference/scaled_scores/crop64"} <= tags
    width, height = decoded_size(pooled_events, "heatmaps/variant/weights")
    assert height < MAX_SIDE + 150 and width < MAX_SIDE + 200  # grid <= 256 plus title, labels and colour bar
    crop_w, crop_h = decoded_size(pooled_events, "heatmaps/variant/weights/crop64")
    assert crop_h >= 64 and crop_w >= 64


def test_histograms_of_weights_and_context(book_events):
    _, _, events = book_events
    assert set(events.Tags()["histograms"]) == {
        "histograms/variant/weights", "histograms/reference/weights",
        "histograms/variant/context", "histograms/reference/context",
    }  # fmt: skip
    histogram = events.Histograms("histograms/variant/weights")[0].histogram_value
    assert histogram.num == 36 and 0 < histogram.min <= histogram.max < 1


def test_text_table_findings_and_config(book_events):
    record, _, events = book_events
    assert text(events, "text/table") == TABLE
    findings = text(events, "text/findings")
    assert findings.startswith("- **error** `scaling` at `scaled_scores`")
    config = text(events, "text/config")
    assert config.startswith("```yaml\n") and config.endswith("\n```")
    import yaml

    assert yaml.safe_load(config[len("```yaml\n") : -len("\n```")])["inputs"]["n_tokens"] == 6
    assert "_target_" not in config and "_convert_" not in config


def test_hparams_session_holds_the_flattened_config(book_events):
    from tensorboard.plugins.hparams import metadata

    _, _, events = book_events
    content = events.PluginTagToContent("hparams")
    start = metadata.parse_session_start_info_plugin_data(content[metadata.SESSION_START_INFO_TAG])
    values = {name: getattr(value, value.WhichOneof("kind")) for name, value in start.hparams.items()}
    assert values == {
        "variant": "unscaled", "seed": 123, "d_out": 2, "weights": "shared", "inputs.kind": "book",
        "n_tokens": 6, "d_in": 3, "inputs.path": "None", "expect.context_shape": "[6, 2]",
        "expect.tolerance": 0.5, "expect.strict": True,
        "status": "ok", "first_divergent_stage": "scaled_scores", "findings": "scaling",  # the verdict, to sort and filter by
    }  # fmt: skip
    assert start.group_name == "0-variant=unscaled s123"  # the trial: the run's folder and seed
    experiment = metadata.parse_experiment_plugin_data(content[metadata.EXPERIMENT_TAG])
    metric_tags = {metric.name.tag for metric in experiment.metric_infos}
    assert "divergence/context" in metric_tags and metric_tags <= set(events.Tags()["scalars"])
    end = metadata.parse_session_end_info_plugin_data(content[metadata.SESSION_END_INFO_TAG])
    assert end.status == 1  # STATUS_SUCCESS


def test_switches_and_missing_stages(tmp_path):
    record = book_record()
    record = replace(record, status="failed", error="RuntimeError: boom", findings=[],
                     reference=replace(record.reference, stages={**record.reference.stages, "weights": None}),
                     variant=replace(record.variant, stages={k: v for k, v in record.variant.stages.items() if k != "scores"},
                                     diagnostics={**record.variant.diagnostics, "divergence_scores": float("nan")}))  # not comparable: drawn
    write_tensorboard([record], tmp_path, table_markdown=TABLE, histograms=False)
    events = accumulate(tmp_path)
    tags = set(events.Tags()["images"])
    assert "heatmaps/variant/weights" in tags and "heatmaps/reference/scores" in tags
    assert not {"heatmaps/reference/weights", "heatmaps/difference/weights", "heatmaps/variant/scores",
                "heatmaps/difference/scores"} & tags  # fmt: skip
    assert events.Tags()["histograms"] == []
    assert text(events, "text/findings") == "**run failed**: RuntimeError: boom\n\nno findings"

    write_tensorboard([book_record()], tmp_path / "no-images", table_markdown=TABLE, images=False)
    assert accumulate(tmp_path / "no-images").Tags()["images"] == []


def test_hparams_hold_the_real_sizes_not_the_configs_nulls(tmp_path):
    import attnlab

    record = attnlab.run("unscaled").record  # book inputs: inputs.n_tokens and inputs.d_in are null in the config
    write_tensorboard([record], tmp_path, table_markdown=TABLE)
    from tensorboard.plugins.hparams import metadata

    content = accumulate(tmp_path).PluginTagToContent("hparams")
    start = metadata.parse_session_start_info_plugin_data(content[metadata.SESSION_START_INFO_TAG])
    assert {k: start.hparams[k].number_value for k in ("n_tokens", "d_in", "d_out")} == {"n_tokens": 6, "d_in": 3, "d_out": 2}
    assert "inputs.embeddings" not in start.hparams and start.hparams["inputs.kind"].string_value == "book"


def test_flat_hparams_leaves_out_log_and_empty_mappings():
    flat = flat_hparams({"variant": {"name": "v", "params": {"causal": False}}, "log": {"x": 1}, "expect": {},
                         "plots": {"diagnostics": ["weights_entropy_mean"]}})  # what is drawn, not what is run
    assert flat == {"variant": "v", "variant.params.causal": False}


# ---- slow: a real TensorBoard server, and a 4096-token run ------------------------------------


def free_port() -> int:
    """TensorBoard 2.21 rejects --port 0, so bind a socket to an ephemeral port and release it."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def get_json(url: str, body: dict | None = None):
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=10) as response:
        return json.loads(response.read())


def wait_for(url: str, ready, server: subprocess.Popen, timeout: float = 60.0):
    """Poll until `ready(json)` holds; bounded, and fails early if the server died."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert server.poll() is None, server.stderr.read().decode(errors="replace")[-2000:]
        try:
            result = get_json(url)
            if ready(result):
                return result
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            pass
        time.sleep(0.5)
    raise AssertionError(f"TensorBoard did not serve {url} within {timeout} s")


@pytest.mark.slow
def test_a_real_tensorboard_server_serves_both_jobs(tmp_path):
    runs = {"0-variant=unscaled": book_record(), "1-variant=unscaled,seed=7": book_record()}
    runs["1-variant=unscaled,seed=7"].config["seed"] = 7
    for name, record in runs.items():
        write_tensorboard([record], tmp_path / name, table_markdown=TABLE)
    port = free_port()
    command = [sys.executable, "-m", "tensorboard.main", "--logdir", str(tmp_path), "--host", "127.0.0.1",
               "--port", str(port), "--reload_interval", "1", "--load_fast", "false"]  # fmt: skip
    server = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    base = f"http://127.0.0.1:{port}/data/plugin"
    try:
        scalars = wait_for(f"{base}/scalars/tags", lambda tags: set(runs) <= set(tags), server)
        assert "divergence/context" in scalars["0-variant=unscaled"]
        images = get_json(f"{base}/images/tags")
        assert "heatmaps/difference/weights" in images["0-variant=unscaled"]
        assert "text/findings" in get_json(f"{base}/text/tags")["0-variant=unscaled"]
        request = {
            "experimentName": "", "startIndex": 0, "sliceSize": 100, "colParams": [],
            "allowedStatuses": ["STATUS_UNKNOWN", "STATUS_SUCCESS", "STATUS_FAILURE", "STATUS_RUNNING"],
        }  # fmt: skip
        groups = get_json(f"{base}/hparams/session_groups", request)
        assert groups["totalSize"] == 2
        seeds = sorted(group["hparams"]["seed"] for group in groups["sessionGroups"])
        assert seeds == [7, 123]
        session = groups["sessionGroups"][0]["sessions"][0]
        metrics = {value["name"]["tag"]: value["value"] for value in session["metricValues"]}
        assert metrics["divergence/context"] == pytest.approx(runs["0-variant=unscaled"].variant.diagnostics[
            "divergence_context"], rel=1e-6)
    finally:
        server.terminate()
        try:
            server.wait(timeout=10)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()


@pytest.mark.slow
def test_a_4096_token_run_stays_under_20_mb(tmp_path):
    record = random_record(4096, d_in=8)
    rng = np.random.default_rng(0)
    random_weights = rng.random((4096, 4096), dtype=np.float32)  # incompressible: the worst case
    weights = random_weights / random_weights.sum(axis=-1, keepdims=True)
    record = replace(record, variant=replace(record.variant, stages={**record.variant.stages, "weights": weights}))
    write_tensorboard([record], tmp_path, table_markdown=TABLE)
    (event_file,) = tmp_path.glob("events.out.tfevents.*")
    assert event_file.stat().st_size < 20 * 1024 * 1024
    assert "heatmaps/variant/weights/crop64" in accumulate(tmp_path).Tags()["images"]


def test_the_fast_checksum_equals_tensorboards_own():
    from tensorboard.compat.tensorflow_stub.pywrap_tensorflow import masked_crc32c as reference_crc

    from attnlab.sinks.tensorboard_format import masked_crc32c

    for data in (b"", b"attention", bytes(range(256)) * 37):
        assert masked_crc32c(data) == reference_crc(data)


def test_writing_leaves_tensorboards_own_writer_untouched(tmp_path):
    """The fast checksum is used by attnlab's own event file, not patched into TensorBoard."""
    from tensorboard.summary.writer import record_writer

    before = record_writer.masked_crc32c
    write_tensorboard([book_record()], tmp_path, table_markdown=TABLE)
    assert record_writer.masked_crc32c is before
    assert accumulate(tmp_path).Tags()["scalars"]


# --- a sweep's curves (attnlab.reporting.sweep_plots) as the runs <sweep>/sweep/<variant> ------------------

def test_a_sweeps_curves_are_a_run_per_variant_at_step_the_swept_value(tmp_path: Path) -> None:
    length_sweep = sweep_of_lengths(tmp_path / "records")
    sink = TensorBoardSink(plots=["weights_entropy_mean"])
    sink.write_sweep(length_sweep, tmp_path)
    sink.write_sweep(length_sweep, tmp_path)  # a rebuilt sweep replaces its runs, never doubles them
    runs = sweep_events(tmp_path / SWEEP_RUN)
    assert list(runs) == ["alibi", "rope"]
    assert len(list((tmp_path / SWEEP_RUN / "rope").glob("events.out.tfevents.*"))) == 1
    tag = "Sweep/n_tokens/weights/entropy_mean"
    assert set(runs["rope"].Tags()["scalars"]) == {f"{tag}/mean", f"{tag}/lower", f"{tag}/upper"}
    means = runs["rope"].Scalars(f"{tag}/mean")
    assert [e.step for e in means] == [4, 16, 64]
    assert means[0].value == pytest.approx(math.log(4) + 1.15, rel=1e-6)
    spread = runs["rope"].Scalars(f"{tag}/upper")[0].value - runs["rope"].Scalars(f"{tag}/lower")[0].value
    assert spread == pytest.approx(2 * float(np.std([0.1, 0.2], ddof=1)), rel=1e-4)
    (category,) = layout_of(runs["alibi"]).category
    assert category.title == "sweep: against n_tokens"
    (chart,) = category.chart
    assert "step = n_tokens" in chart.title
    series = chart.margin.series[0]
    assert (series.value, series.lower, series.upper) == (f"{tag}/mean", f"{tag}/lower", f"{tag}/upper")


def test_a_sweeps_layout_names_what_an_index_step_means(tmp_path: Path) -> None:
    report = report_of(tmp_path, [sweep_record("softcap", 1, 8, entropy=cap, cap=cap) for cap in (0.5, 2.5)])
    TensorBoardSink(plots=["weights_entropy_mean"]).write_sweep(report, tmp_path / "out")
    events = sweep_events(tmp_path / "out" / SWEEP_RUN)["softcap"]
    (curve,), _ = sweep_curves(report, ["weights_entropy_mean"])
    assert [e.step for e in events.Scalars(f"{sweep_tag(curve)}/mean")] == [0, 1]
    assert "step = index of variant.params.cap: 0 = 0.5, 1 = 2.5" in layout_of(events).category[0].chart[0].title


def test_a_sweeps_charts_are_written_last_first_for_the_dashboard_to_show_them_in_order(tmp_path: Path) -> None:
    """TensorBoard 2.21's Custom Scalars lays a category's charts out last first (seen in Chromium:
    h3 … h0 where h0 … h3 was written), so the layout holds them reversed."""
    report = sweep_of_lengths(tmp_path)
    asked = ["weights_entropy_mean", "divergence_context_h*"]
    TensorBoardSink(plots=asked).write_sweep(report, tmp_path / "out")
    curves, _ = sweep_curves(report, asked)
    (category,) = layout_of(sweep_events(tmp_path / "out" / SWEEP_RUN)["alibi"]).category
    written = [chart.title.split(" ")[0] for chart in category.chart]
    assert written == [metric_name(curve.diagnostic) for curve in reversed(curves)]
    assert written[-1] == "weights/entropy_mean"  # shown first


def test_a_sweep_job_writes_into_its_variants_run_at_its_job_number(tmp_path: Path) -> None:
    """Every job at step 0 stacked a sweep's runs into one vertical cloud of dots; jobs sharing a run
    at one step would cover each other's images."""
    from attnlab.sinks.base import JobInfo

    record = book_record()
    for num in (3, 5):
        job = JobInfo(dir=tmp_path / f"{num}-seed={num}", sweep_dir=tmp_path, num=num)
        write_tensorboard([record], job.dir, table_markdown=TABLE, histograms=False, job=job)
        assert not list(job.dir.glob("events.out.tfevents.*"))
    events = accumulate(tmp_path / record.variant.name)  # no multirun.yaml: nothing swept but the variant
    assert [point.step for point in events.Scalars("divergence/context")] == [3, 5]
    assert [image.step for image in events.Images("heatmaps/variant/weights")] == [3, 5]
    assert [text.step for text in events.Tensors("text/findings")] == [3, 5]


def test_a_sweeps_curves_sort_before_every_jobs_scalars(book_events, tmp_path: Path) -> None:
    """The Time Series tab lists tag groups in code-point order: the sweep's group comes first."""
    _, _, events = book_events
    report = sweep_of_lengths(tmp_path)
    curves, _ = sweep_curves(report, ["weights_entropy_mean"])
    assert all(sweep_tag(curve) < min(events.Tags()["scalars"]) for curve in curves)


def test_the_config_text_is_what_pyyamls_own_emitter_writes():
    """The config block as PyYAML's pure-Python SafeDumper writes it (the sink may use libyaml's
    emitter), for values a config can hold: token labels of any script, long texts, numbers."""
    import yaml

    from attnlab.sinks.tensorboard import config_markdown

    config = {
        "inputs": {"_target_": "x.y", "labels": ["·journey", "Ünïcødé ☃", "😀", "a: b", "- x", "'q'", '"dq"', " lead",
                                               "", "null", "yes", "1e3", "#c", "tab\tx", "\x07", "x\ny", "\u2028"],
                   "text": "Your journey starts with one step. " * 10, "word": "x" * 250},
        "nums": [0.1, 1e-7, -0.0, float("inf"), float("nan"), 10**20, True, None],
        "nested": {"a": {}, "b": [], "c": [[1, 2], [3, [4, {}]]], "with space": {"ü": None}},
    }
    expected = yaml.safe_dump({**config, "inputs": {k: v for k, v in config["inputs"].items() if k != "_target_"}},
                              sort_keys=False, default_flow_style=None, width=100)
    assert config_markdown(config) == "```yaml\n" + expected.rstrip("\n") + "\n```"


def test_a_sweep_job_run_again_replaces_its_own_event_file(tmp_path: Path) -> None:
    """A resumed sweep runs a failed job again: its run must not hold both attempts at one step."""
    from attnlab.sinks.base import JobInfo

    record = book_record()
    for num in (1, 2, 2):
        job = JobInfo(dir=tmp_path / f"{num}-seed={num}", sweep_dir=tmp_path, num=num)
        write_tensorboard([record], job.dir, table_markdown=TABLE, images=False, histograms=False, job=job)
    assert len(list((tmp_path / record.variant.name).glob("events.out.tfevents.*"))) == 2
    assert [point.step for point in accumulate(tmp_path / record.variant.name).Scalars("divergence/context")] == [1, 2]


def test_each_heads_maps_lead_the_images_together(tmp_path: Path) -> None:
    """TensorBoard pages a tag group a dozen images at a time in name order: the heads are a group
    of their own before `heatmaps`, and a head's variant, reference and difference are neighbours."""
    from attnlab.sinks.tensorboard import head_first

    assert head_first("heatmaps/variant/weights/head2") == "heads/weights/head2/variant"
    assert head_first("heatmaps/variant/weights") == "heatmaps/variant/weights"
    assert head_first("heatmaps/variant/weights/crop64") == "heatmaps/variant/weights/crop64"
    import attnlab

    result = attnlab.run("mha_softmax_head_axis", d_out=4, num_heads=2, log={"tensorboard": False, "table": False})
    write_tensorboard([result.record], tmp_path, table_markdown=TABLE, histograms=False)
    tags = accumulate(tmp_path).Tags()["images"]
    heads = [tag for tag in tags if tag.startswith("heads/")]
    assert len(heads) >= 6 and sorted(tags)[: len(heads)] == sorted(heads)
    for tag in heads:  # the weights differ in every head: each head's three maps
        stage, head, _ = tag.split("/")[1:]
        assert {f"heads/{stage}/{head}/{source}" for source in ("variant", "reference", "difference")} <= set(heads)
