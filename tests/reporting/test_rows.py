"""Every config value a sweep's jobs differ in is a table column and a grouping key."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

import attnlab
from attnlab.reporting.aggregate import Report, find_record_files, load_records, summary_table
from attnlab.sinks.table import TableSink

NO_SINKS = {"log": {"tensorboard": False, "terminal": False, "table": False, "html": False}}


def _sweep(tmp_path: Path, runs: list[dict]) -> Report:
    """Real jobs through attnlab.run, written as the folders of one sweep, read back from disk."""
    for num, kwargs in enumerate(runs):
        attnlab.run(out_dir=tmp_path / "sweep" / f"{num}-job", **{**NO_SINKS, **kwargs})
    records, problems = load_records(find_record_files([tmp_path / "sweep"]))
    assert not problems
    return Report(records)


@pytest.mark.slow
def test_num_kv_heads_is_a_column_and_splits_the_summary(tmp_path: Path) -> None:
    report = _sweep(tmp_path, [dict(variant="gqa", seed=seed, num_heads=4, num_kv_heads=kv, d_out=8)
                               for kv in (4, 2, 1) for seed in (1, 2)])
    TableSink().write_sweep(report, tmp_path / "sweep")
    with open(tmp_path / "sweep" / "comparison.csv") as handle:
        rows = list(csv.DictReader(handle))
    assert [row["num_kv_heads"] for row in rows] == ["1", "1", "2", "2", "4", "4"]
    summary = summary_table(report.jobs)
    assert list(summary.index) == ["gqa · num_kv_heads=1", "gqa · num_kv_heads=2", "gqa · num_kv_heads=4"]
    assert list(summary[("jobs", "count")]) == [2, 2, 2]
    assert ("num_kv_heads", "mean") not in summary  # configuration, not a measurement
    markdown = (tmp_path / "sweep" / "comparison.md").read_text()
    assert "num_kv_heads=2" in markdown
    from attnlab.sinks.html import render_html

    page = render_html(report)  # a card per configuration, each with its own jobs' notes only
    assert [page.count(f"<h3>gqa · num_kv_heads={kv}</h3>") for kv in (1, 2, 4)] == [1, 1, 1]


@pytest.mark.slow
def test_a_swept_weights_init_is_not_pooled(tmp_path: Path) -> None:
    report = _sweep(tmp_path, [dict(variant="unscaled", seed=seed, weights_init=init)
                               for init in ("rand", "normal") for seed in (1, 2)])
    assert "weights_init" in report.jobs.columns
    summary = summary_table(report.jobs)
    assert list(summary.index) == ["unscaled · weights_init=normal", "unscaled · weights_init=rand"]
    # each configuration's mean is of its own two jobs only
    for label, init in (("unscaled · weights_init=rand", "rand"), ("unscaled · weights_init=normal", "normal")):
        own = report.jobs[report.jobs["weights_init"] == init]["divergence_context"]
        assert summary.loc[label, ("divergence_context", "mean")] == pytest.approx(own.mean())


def test_a_variant_param_differing_only_between_variants_is_no_column(tmp_path: Path) -> None:
    report = _sweep(tmp_path, [dict(variant="sliding_window", seed=1), dict(variant="softcap", seed=1),
                               dict(variant="sliding_window", seed=1, overrides=["variant.params.window=2"])])
    assert "variant.params.window" in report.jobs.columns  # differs within sliding_window
    assert "variant.params.cap" not in report.jobs.columns  # follows from the variant's name
    assert not any(column.endswith(("_target_", "_convert_")) for column in report.jobs.columns)


def test_a_jobs_transposed_markdown_has_a_header_row() -> None:
    """TensorBoard's text/table: a markdown table needs a header row before its separator, or it
    renders as raw pipes."""
    from attnlab.reporting.rows import job_rows, rows_markdown

    record = attnlab.run("unscaled", log={"tensorboard": False, "table": False}).record
    lines = rows_markdown(job_rows([record]), transpose=True).splitlines()
    assert [cell.strip() for cell in lines[0].strip("|").split("|")] == ["module", "reference", "variant"]
    assert set(lines[1]) <= set("|-: ")  # the separator comes second
    assert lines[2].startswith("| variant ")
