"""TensorBoard's event format, written without its writer: the event file (TFRecord framing with the
`crc32c` package's checksum) and the summaries attnlab logs (scalars, images, histograms, custom
scalars, HParams sessions), built from TensorBoard's protobuf classes alone. The sink and the
training outputs write through it; nothing here knows what a record is.

Why: importing anything under `torch.utils.tensorboard` runs its package `__init__`, whose writer
imports `tensorflow` where it is installed (the `llms-from-scratch` package installs it): its
start-up banner and seconds of import on a run that never uses it. The protos import nothing of it.
"""

from __future__ import annotations

import itertools
import os
import socket
import struct
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from tensorboard.compat.proto.summary_pb2 import Summary

    from attnlab.reporting.job_heatmaps import EncodedHeatmap


def histogram(name: str, values: np.ndarray, bins: int) -> Any:
    """A histogram summary of finite `values`: TensorBoard keeps each bucket's right edge, so an
    empty bucket on the left holds the leftmost edge (as torch's make_histogram does)."""
    from tensorboard.compat.proto.summary_pb2 import HistogramProto, Summary

    values = np.asarray(values, dtype=float).reshape(-1)
    counts, limits = np.histogram(values, bins=bins)
    filled = np.flatnonzero(counts)
    start, end = int(filled[0]), int(filled[-1]) + 1  # the support: the first to the last filled bucket
    counts = np.concatenate([[0], counts[start:end]])
    limits = limits[start:end + 1]
    hist = HistogramProto(min=float(values.min()), max=float(values.max()), num=int(values.size),
                          sum=float(values.sum()), sum_squares=float(values.dot(values)),
                          bucket_limit=limits.tolist(), bucket=counts.tolist())
    return Summary(value=[Summary.Value(tag=name, histo=hist)])


def custom_scalars(layout: Mapping[str, Mapping[str, Sequence[str | Sequence[str]]]]) -> Any:
    """The custom-scalars layout `{category: {chart title: ["Margin", [value, lower, upper]] or
    ["Multiline", [tags]]}}`, as torch's `custom_scalars` writes it."""
    from tensorboard.compat.proto.summary_pb2 import Summary, SummaryMetadata
    from tensorboard.compat.proto.tensor_pb2 import TensorProto
    from tensorboard.compat.proto.tensor_shape_pb2 import TensorShapeProto
    from tensorboard.plugins.custom_scalar import layout_pb2

    categories = []
    for title, charts in layout.items():
        built = []
        for chart_title, (kind, tags) in charts.items():
            if kind == "Margin":
                series = layout_pb2.MarginChartContent.Series(value=tags[0], lower=tags[1], upper=tags[2])
                built.append(layout_pb2.Chart(title=chart_title, margin=layout_pb2.MarginChartContent(series=[series])))
            else:
                built.append(layout_pb2.Chart(title=chart_title, multiline=layout_pb2.MultilineChartContent(tag=tags)))
        categories.append(layout_pb2.Category(title=title, chart=built))
    tensor = TensorProto(dtype="DT_STRING", string_val=[layout_pb2.Layout(category=categories).SerializeToString()],
                         tensor_shape=TensorShapeProto())
    metadata = SummaryMetadata(plugin_data=SummaryMetadata.PluginData(plugin_name="custom_scalars"))
    return Summary(value=[Summary.Value(tag="custom_scalars__config__", tensor=tensor, metadata=metadata)])


class EventFile:
    """A TensorBoard event file: TFRecord framing (length, masked CRC-32C of it, the `Event`
    bytes, their masked CRC-32C), named as TensorBoard's writer names them."""

    _numbers = itertools.count()

    def __init__(self, folder: Path, suffix: str = "") -> None:
        number = next(self._numbers)
        name = f"events.out.tfevents.{int(time.time()):010d}.{socket.gethostname()}.{os.getpid()}.{number}{suffix}"
        Path(folder).mkdir(parents=True, exist_ok=True)
        self.path = Path(folder) / name
        # written under a name TensorBoard does not read, renamed when complete: a kill leaves no half run
        self._partial = Path(folder) / f".attnlab-events.{os.getpid()}.{number}{suffix}.tmp"
        self._file = open(self._partial, "wb")
        self._event(file_version="brain.Event:2")

    def add(self, summary: Summary, step: int = 0) -> None:
        self._event(summary=summary, step=step)

    def _event(self, **fields: Any) -> None:
        from tensorboard.compat.proto.event_pb2 import Event

        data = Event(wall_time=time.time(), **fields).SerializeToString()
        header = struct.pack("<Q", len(data))
        self._file.write(header + struct.pack("<I", masked_crc32c(header)) + data
                         + struct.pack("<I", masked_crc32c(data)))

    def __enter__(self) -> EventFile:
        return self

    def __exit__(self, exc_type: type | None, *exc: object) -> None:
        self._file.close()
        if exc_type is None:
            os.replace(self._partial, self.path)
        else:
            self._partial.unlink(missing_ok=True)


def masked_crc32c(data: bytes) -> int:
    """TFRecord's masked CRC-32C, as tensorboard.compat.tensorflow_stub.pywrap_tensorflow defines it."""
    import crc32c

    crc = crc32c.crc32c(data)
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def scalars_summary(values: Mapping[str, float]) -> Summary:
    """Every scalar of a step in one summary, as add_scalar writes each (a simple_value): one
    event instead of ~70, a tenth of a book-size job's TensorBoard time."""
    from tensorboard.compat.proto.summary_pb2 import Summary

    return Summary(value=[Summary.Value(tag=tag, simple_value=value) for tag, value in values.items()])


def image_summary(tag: str, image: EncodedHeatmap) -> Summary:
    """An image summary from our own PNG bytes: torch's add_image re-encodes with Pillow, ~4x
    slower on these images (see attnlab.drawing.png.to_png_bytes)."""
    from tensorboard.compat.proto.summary_pb2 import Summary

    encoded = Summary.Image(height=image.height, width=image.width, colorspace=3, encoded_image_string=image.png)
    return Summary(value=[Summary.Value(tag=tag, image=encoded)])


def hparams_summaries(hparams: Mapping[str, bool | int | float | str], metrics: list[str], *,
                      ok: bool, swept: Sequence[str] | None = None, shown: Sequence[str] = (),
                      trial: str = "") -> list[Summary]:
    """Experiment, session start and session end summaries for the HParams plugin.

    Built here rather than by torch's `summary.hparams`, which records bools as numbers
    (`isinstance(True, int)`), and rather than tensorboard's own `hparams.summary`, which needs
    TensorFlow. No hparam domains: one job cannot know the values its sweep siblings take.

    The experiment declares every hyperparameter of the job, the swept ones (`swept`) and those
    shown beside them (`shown`: a verdict) marked `differs`, which the dashboard sorts first and shows (its first five):
    TensorBoard reads one experiment per logdir, and a logdir of several sweeps needs each sweep's
    keys (`d_out`, `num_kv_heads`) declared by every session. `trial` names the session's group,
    HParams' trial id.
    """
    from tensorboard.plugins.hparams import api_pb2, metadata, plugin_data_pb2

    start = plugin_data_pb2.SessionStartInfo(start_time_secs=time.time(), group_name=trial)
    swept = list(swept or [])
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
        infos.append(api_pb2.HParamInfo(name=name, type=data_type, differs=name in swept or name in shown))
    infos += [api_pb2.HParamInfo(name=name, type=api_pb2.DATA_TYPE_STRING, differs=True)
              for name in swept if name not in hparams]
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
