"""The two TensorBoard summaries the sink took from `torch.utils.tensorboard.summary`, built from
TensorBoard's protobuf classes alone.

Why: importing anything under `torch.utils.tensorboard` runs its package `__init__`, whose writer
imports `tensorflow` where it is installed (the `llms-from-scratch` package installs it): its
start-up banner and seconds of import on a run that never uses it. The protos import nothing of it.
"""

from __future__ import annotations

from typing import Any

import numpy as np


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


def custom_scalars(layout: dict[str, dict[str, list]]) -> Any:
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
