"""TensorBoard sink: one run per job, its event file directly in the job folder.

Nothing here creates a sub-run: no `add_hparams` (a timestamped sub-folder) and no
`add_scalars` (one writer per key). So `tensorboard --logdir runs` lists every job by its folder
name and a sweep folder alone is a valid logdir. A job is one point at step 0 (an n_seeds job:
one point per seed, at step=seed), and the HParams dashboard compares jobs.

Tags:
- scalars: every numeric diagnostic, grouped by its prefix (`divergence_context` ->
  `divergence/context`, `scale_observed` -> `scaling/observed`, unknown -> `diagnostics/<name>`).
  The variant owns the plain namespace; the reference's own diagnostics go under `reference/...`,
  except comparisons (divergence), which for the reference against itself are 0 by definition.
- images: `heatmaps/{variant,reference,difference}/<stage>`, plus `.../crop64` above 512 tokens.
- histograms: `histograms/{variant,reference}/<stage>`.
- text: `text/table`, `text/findings`, `text/config`.
- hparams: one session per job; the metrics are scalar tags logged above.

TensorBoard and torch.utils.tensorboard are imported inside the functions: they cost about a
second, which a run that does not log to TensorBoard should not pay.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from attnlab.heatmap import EncodedHeatmap, encoded_heatmap_views
from attnlab.record import Finding, Record

if TYPE_CHECKING:
    from tensorboard.compat.proto.summary_pb2 import Summary
    from torch.utils.tensorboard import SummaryWriter

HEATMAP_STAGES = ("scores", "scaled_scores", "weights", "context")
HISTOGRAM_STAGES = ("weights", "context")
TOKEN_BY_TOKEN = {"scores", "scaled_scores", "weights"}  # columns are key tokens; context's are dims
HISTOGRAM_BINS = 64  # uniform bins: TensorBoard's default ~1500 exponential buckets are slow at 4096^2

# diagnostics prefix -> scalar group; a longer prefix before any prefix it contains
_GROUPS = (
    ("relative_divergence_", "relative_divergence"),
    ("divergence_", "divergence"),
    ("non_finite_", "non_finite"),
    ("shape_ok_", "shape_ok"),
    ("weights_", "weights"),
    ("scale_", "scaling"),
    ("softmax_", "softmax"),
    ("batched_single_", "batched_single"),
)
_COMPARISON_GROUPS = {"divergence", "relative_divergence"}

HPARAM_METRICS = (
    "divergence/context",
    "relative_divergence/context",
    "weights/entropy_mean",
    "weights/row_sum_max_err",
    "scaling/observed",
    "batched_single/max_abs_diff",
)
# the sweep table's column names (attnlab.sinks.table.KEY_COLUMNS), so both views agree
_HPARAM_ALIASES = {"variant.name": "variant", "inputs.n_tokens": "n_tokens", "inputs.d_in": "d_in"}
_HPARAM_SKIP = {"log"}  # output switches, not settings; Hydra's override_dirname leaves them out too
_HPARAM_DATA = {"inputs.embeddings", "inputs.labels"}  # the token data itself, not a setting to compare

_REF = r"^(reference/)?"
CUSTOM_SCALARS_LAYOUT = {
    "Divergence": {
        "divergence": ["Multiline", [r"^divergence/"]],
        "relative divergence": ["Multiline", [r"^relative_divergence/"]],
        "non-finite values": ["Multiline", [_REF + r"non_finite/"]],
    },
    "Weights": {
        "row / column sum error": ["Multiline", [_REF + r"weights/(row|col)_sum_max_err$"]],
        "entropy": ["Multiline", [_REF + r"weights/entropy"]],
        "range and peaks": ["Multiline", [_REF + r"weights/(min|max|row_max_mean|first_token_mass)$"]],
    },
    "Scaling": {
        "scale": ["Multiline", [_REF + r"scaling/"]],
        "softmax dim": ["Multiline", [_REF + r"softmax/"]],
        "batched vs single": ["Multiline", [_REF + r"batched_single/"]],
    },
}


def write_tensorboard(
    records: list[Record],
    job_dir: Path,
    *,
    table_markdown: str,
    images: bool = True,
    histograms: bool = True,
) -> None:
    """Write one job as one TensorBoard run whose event file sits in `job_dir`.

    One record is logged at step 0. Several (an `n_seeds` job) put each seed's scalars at
    step=seed, so the charts show the spread over seeds; the images, histograms, texts and the
    HParams session (with the first seed's metrics) come from the first record that ran.
    """
    from torch.utils.tensorboard import SummaryWriter

    ok = [record for record in records if record.ok]
    first = ok[0] if ok else records[0]  # a failed job still gets its error and a failed HParams session
    _use_fast_checksums()
    writer = SummaryWriter(log_dir=str(job_dir), max_queue=100_000, flush_secs=3600)
    try:
        for record in ok:
            step = 0 if len(records) == 1 else record.seed
            writer.file_writer.add_summary(scalars_summary(scalar_values(record)), global_step=step)
        writer.add_custom_scalars(CUSTOM_SCALARS_LAYOUT)
        if images:
            _write_heatmaps(writer, first)
        if histograms:
            _write_histograms(writer, first)
        _write_texts(writer, {"table": table_markdown, "findings": findings_markdown(first),
                              "config": config_markdown(first.config)})
        scalars = scalar_values(first)
        metrics = [tag for tag in HPARAM_METRICS if tag in scalars]
        hparams = {**flat_hparams(first.config), "n_tokens": first.n_tokens, "d_in": first.d_in, "d_out": first.d_out}
        for summary in hparams_summaries(hparams, metrics, ok=first.ok):
            writer.file_writer.add_summary(summary, global_step=0)
    finally:
        writer.close()


def _use_fast_checksums() -> None:
    """TensorBoard's event writer checksums every record with a pure-Python CRC-32C (~3.5 MB/s:
    about 60 ms of a book-size job's 220 KB). The `crc32c` package computes the same checksum in
    C; it is swapped into the one name the record writer looks up. Same bytes on disk."""
    from tensorboard.summary.writer import record_writer

    record_writer.masked_crc32c = masked_crc32c


def masked_crc32c(data: bytes) -> int:
    """TFRecord's masked CRC-32C, as tensorboard.compat.tensorflow_stub.pywrap_tensorflow defines it."""
    import crc32c

    crc = crc32c.crc32c(data)
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def scalar_tag(name: str) -> str:
    """The grouped TensorBoard tag of a diagnostics key."""
    for prefix, group in _GROUPS:
        if name.startswith(prefix) and len(name) > len(prefix):
            return f"{group}/{name[len(prefix):]}"
    return f"diagnostics/{name}"


def scalar_values(record: Record) -> dict[str, float]:
    """{tag: value} of the variant's and the reference's numeric diagnostics; NaN is skipped."""
    tagged = {scalar_tag(name): value for name, value in record.diagnostics.items()}
    for name, value in record.reference_diagnostics.items():
        tag = scalar_tag(name)
        if tag.split("/")[0] not in _COMPARISON_GROUPS:
            tagged[f"reference/{tag}"] = value
    return {tag: float(value) for tag, value in tagged.items() if _is_number(value) and not math.isnan(value)}


def scalars_summary(values: Mapping[str, float]) -> Summary:
    """Every scalar of a step in one summary, as add_scalar writes each (a simple_value): one
    event instead of ~70, a tenth of a book-size job's TensorBoard time."""
    from tensorboard.compat.proto.summary_pb2 import Summary

    return Summary(value=[Summary.Value(tag=tag, simple_value=value) for tag, value in values.items()])


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float, np.number, np.bool_))


def _write_heatmaps(writer: SummaryWriter, record: Record) -> None:
    for stage in HEATMAP_STAGES:
        batch = int((record.config.get("show") or {}).get("batch", 0))
        variant = record.heads_view(stage, batch=batch)
        reference = record.heads_view(stage, batch=batch, reference=True)
        sources = {"variant": variant, "reference": reference}
        if variant is not None and reference is not None and np.shape(variant) == np.shape(reference):
            with np.errstate(invalid="ignore"):  # a mask's -inf against the same -inf
                difference = np.asarray(variant, np.float32) - np.asarray(reference, np.float32)
            sources["difference"] = np.where(np.asarray(variant) == np.asarray(reference), 0.0, difference)
        for source, values in sources.items():
            if values is None:
                continue
            rows, cols = _labels(record, stage, np.shape(values))
            views = encoded_heatmap_views(values, title=f"{stage} ({source})", row_labels=rows, col_labels=cols,
                                          diverging=source == "difference")
            for view, image in views.items():
                tag = f"heatmaps/{source}/{stage}" + ("" if view == "main" else f"/{view}")
                writer.file_writer.add_summary(image_summary(tag, image), global_step=0)


def _labels(record: Record, stage: str, shape: tuple[int, ...]) -> tuple[list[str] | None, list[str] | None]:
    """Token labels for the axes that are tokens (when they match), `d<i>` for context's columns."""
    n_rows, n_cols = (1, shape[0]) if len(shape) == 1 else shape[-2:]

    def tokens(n: int) -> list[str] | None:
        return list(record.labels) if len(record.labels) == n else None

    rows = tokens(n_rows) if len(shape) > 1 else None
    cols = tokens(n_cols) if stage in TOKEN_BY_TOKEN else [f"d{i}" for i in range(n_cols)]
    return rows, cols


def image_summary(tag: str, image: EncodedHeatmap) -> Summary:
    """An image summary from our own PNG bytes: torch's add_image re-encodes with Pillow, ~4x
    slower on these images (see attnlab.heatmap.to_png_bytes)."""
    from tensorboard.compat.proto.summary_pb2 import Summary

    encoded = Summary.Image(height=image.height, width=image.width, colorspace=3, encoded_image_string=image.png)
    return Summary(value=[Summary.Value(tag=tag, image=encoded)])


def _write_histograms(writer: SummaryWriter, record: Record) -> None:
    """Histograms of the finite values only: np.histogram cannot bin NaN or infinity, and the
    non_finite/<stage> scalars already count them."""
    for stage in HISTOGRAM_STAGES:
        for source, stages in (("variant", record.stages), ("reference", record.reference_stages)):
            values = stages.get(stage)
            if values is None:
                continue
            values = np.asarray(values)
            finite = values[np.isfinite(values)]
            if finite.size:
                writer.add_histogram(f"histograms/{source}/{stage}", finite, global_step=0, bins=HISTOGRAM_BINS)


def _write_texts(writer: SummaryWriter, texts: dict[str, str]) -> None:
    """Markdown under `text/<name>`, via tensorboard's own text summary: torch's add_text would
    append `/text_summary` to every tag."""
    from tensorboard.plugins.text.summary_v2 import text_pb

    for name, markdown in texts.items():
        writer.file_writer.add_summary(text_pb(f"text/{name}", markdown), global_step=0)


def findings_markdown(record: Record) -> str:
    """A markdown list of the findings ("no findings" when empty), the failure first if any."""
    lines = [] if record.ok else [f"**run failed**: {record.error or 'no error message'}", ""]
    lines += [_finding_line(finding) for finding in record.findings] or ["no findings"]
    return "\n".join(lines)


def _finding_line(finding: Finding) -> str:
    return f"- **{finding.severity}** `{finding.code}` at `{finding.stage}`: {finding.message}"


def config_markdown(config: Mapping[str, Any]) -> str:
    """The resolved config as a fenced JSON block (TensorBoard's markdown renders fenced code)."""
    return "```json\n" + json.dumps(config, indent=2, default=_json_default) + "\n```"


def _json_default(value: Any) -> Any:
    return value.item() if isinstance(value, np.generic) else str(value)


def flat_hparams(config: Mapping[str, Any]) -> dict[str, bool | int | float | str]:
    """The config as HParams: dot-joined keys, `variant.name` as `variant`, `inputs.n_tokens` as
    `n_tokens`, `inputs.d_in` as `d_in`; empty mappings vanish; `log.*` is left out."""
    flat: dict[str, bool | int | float | str] = {}

    def walk(prefix: str, value: Any) -> None:
        if isinstance(value, Mapping):
            for key, item in value.items():
                walk(f"{prefix}.{key}" if prefix else str(key), item)
        elif prefix not in _HPARAM_DATA:
            flat[_HPARAM_ALIASES.get(prefix, prefix)] = _hparam_value(value)

    walk("", {key: value for key, value in config.items() if key not in _HPARAM_SKIP})
    return flat


def _hparam_value(value: Any) -> bool | int | float | str:
    """HParams values are bool, number or string: numpy scalars become Python numbers, lists
    become JSON, None becomes "None"."""
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, (bool, int, float, str)):
        return value
    if value is None:
        return "None"
    if isinstance(value, (list, tuple)):
        return json.dumps(list(value), default=_json_default)
    return str(value)


def hparams_summaries(hparams: Mapping[str, bool | int | float | str], metrics: list[str], *,
                      ok: bool) -> list[Summary]:
    """Experiment, session start and session end summaries for the HParams plugin.

    Built here rather than by torch's `summary.hparams`, which records bools as numbers
    (`isinstance(True, int)`), and rather than tensorboard's own `hparams.summary`, which needs
    TensorFlow. No hparam domains: one job cannot know the values its sweep siblings take.
    """
    from tensorboard.plugins.hparams import api_pb2, metadata, plugin_data_pb2

    start = plugin_data_pb2.SessionStartInfo(start_time_secs=time.time())
    infos = []
    for name, value in hparams.items():
        if isinstance(value, bool):
            start.hparams[name].bool_value = value
            data_type = api_pb2.DATA_TYPE_BOOL
        elif isinstance(value, (int, float)):
            start.hparams[name].number_value = value
            data_type = api_pb2.DATA_TYPE_FLOAT64
        else:
            start.hparams[name].string_value = value
            data_type = api_pb2.DATA_TYPE_STRING
        infos.append(api_pb2.HParamInfo(name=name, type=data_type))
    experiment = api_pb2.Experiment(
        hparam_infos=infos, metric_infos=[api_pb2.MetricInfo(name=api_pb2.MetricName(tag=tag)) for tag in metrics]
    )
    status = api_pb2.STATUS_SUCCESS if ok else api_pb2.STATUS_FAILURE
    end = plugin_data_pb2.SessionEndInfo(status=status, end_time_secs=time.time())
    return [
        _hparams_summary(metadata.EXPERIMENT_TAG, plugin_data_pb2.HParamsPluginData(experiment=experiment)),
        _hparams_summary(metadata.SESSION_START_INFO_TAG, plugin_data_pb2.HParamsPluginData(session_start_info=start)),
        _hparams_summary(metadata.SESSION_END_INFO_TAG, plugin_data_pb2.HParamsPluginData(session_end_info=end)),
    ]


def _hparams_summary(tag: str, data: Any) -> Summary:
    from tensorboard.compat.proto.summary_pb2 import Summary
    from tensorboard.plugins.hparams import metadata

    value = Summary.Value(tag=tag, metadata=metadata.create_summary_metadata(data), tensor=metadata.NULL_TENSOR)
    return Summary(value=[value])
