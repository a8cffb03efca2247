"""Shared helpers for the sweep-plot tests (attnlab.reporting.sweep_plots, and the html and tensorboard
sinks' sweep outputs): records of a sweep on disk read back, the plots of a page, the sweep's
TensorBoard runs."""

from __future__ import annotations

import math
from html.parser import HTMLParser
from pathlib import Path

from attnlab.record import Record, Side, write_record
from attnlab.reporting.aggregate import Report, find_record_files, load_records


def sweep_record(variant: str, seed: int, n_tokens: int, *, entropy: float, cap: float | None = None,
                 heads: list[float] | None = None, status: str = "ok") -> Record:
    params = {} if cap is None else {"cap": cap}
    return Record(
        seed=seed, n_tokens=n_tokens, d_in=4, d_out=4, status=status,
        config={"variant": {"name": variant, "params": params}, "seed": seed, "inputs": {"kind": "random", "n_tokens": n_tokens}},
        variant=Side(variant, diagnostics={"weights_entropy_mean": entropy, "divergence_context": 0.0} if status == "ok" else {}),
        head_diagnostics={"divergence_context": heads} if heads else {},
        error=None if status == "ok" else "boom",
    )


def report_of(tmp_path: Path, records: list[Record]) -> Report:
    """The records as a sweep on disk, read back: the sweep's config values come from the files."""
    for num, record in enumerate(records):
        write_record(record, tmp_path / "sweep" / f"{num}-job")
    loaded, problems = load_records(find_record_files([tmp_path / "sweep"]))
    assert not problems
    return Report(loaded)


def sweep_of_lengths(tmp_path: Path) -> Report:
    """Two variants x n_tokens 4, 16, 64 x seeds 1, 2; entropy = log(n) + seed / 10 (+1 for rope);
    per-head context divergence [0, seed]."""
    return report_of(tmp_path, [
        sweep_record(variant, seed, n, entropy=math.log(n) + seed / 10 + (variant == "rope"), heads=[0.0, seed * 1.0])
        for variant in ("alibi", "rope") for n in (4, 16, 64) for seed in (1, 2)
    ])


class Page(HTMLParser):
    """The plots of comparison.html: each svg.sweep-plot's keys, its legend texts and polylines;
    and every <img>'s alt and source."""

    def __init__(self, page: str) -> None:
        super().__init__()
        self.plots: list[dict] = []
        self.images: list[dict] = []
        self._legend = self._text = False
        self.feed(page)

    def handle_starttag(self, tag: str, attrs: list) -> None:
        attrs = dict(attrs)
        if tag == "svg" and "sweep-plot" in (attrs.get("class") or ""):
            self.plots.append({"diagnostic": attrs["data-diagnostic"], "key": attrs["data-key"], "legend": [], "lines": 0})
        elif self.plots and tag == "g" and attrs.get("class") == "legend":
            self._legend = True
        elif self.plots and tag == "polyline":
            self.plots[-1]["lines"] += 1
        elif tag == "text":
            self._text = True
        elif tag == "img":
            self.images.append(attrs)

    def handle_endtag(self, tag: str) -> None:
        if tag == "g":
            self._legend = False
        elif tag == "text":
            self._text = False

    def handle_data(self, data: str) -> None:
        if self._legend and self._text:
            self.plots[-1]["legend"].append(data)


def sweep_events(folder: Path) -> dict[str, object]:
    """{run name: its EventAccumulator} of every run under `folder`."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    runs = sorted({f.parent for f in folder.rglob("events.out.tfevents.*")})
    return {run.name: EventAccumulator(str(run), size_guidance={"scalars": 0, "tensors": 0}).Reload() for run in runs}


def layout_of(events) -> object:
    from tensorboard.plugins.custom_scalar import layout_pb2

    tag = next(iter(events.PluginTagToContent("custom_scalars")))
    return layout_pb2.Layout.FromString(events.Tensors(tag)[0].tensor_proto.string_val[0])

