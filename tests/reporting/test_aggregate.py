"""attnlab.reporting.aggregate: records on disk -> jobs table, per-configuration summary, differs view, files."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from attnlab.record import Finding, Record, Side, write_record
from attnlab.reporting.aggregate import (
    Report,
    differs_table,
    find_record_files,
    load_records,
    rebuild,
    summary_table,
    summary_view,
    terminal_table,
)
from attnlab.sinks.html import HtmlSink
from attnlab.sinks.table import TableSink, write_markdown_report


def make_record(variant: str, seed: int, *, d_out: int = 2, entropy: float = 1.0, status: str = "ok") -> Record:
    weights = np.full((2, 2), 0.5, dtype=np.float32)
    ok = status == "ok"
    return Record(
        seed=seed, config={"inputs": {"kind": "book"}, "weights": "shared"},
        n_tokens=2, d_in=3, d_out=d_out, status=status, error=None if ok else "variant raised RuntimeError: boom",
        labels=["a", "b"], variant=Side(variant, stages={"weights": weights} if ok else {},
                                        shapes={"weights": [2, 2]} if ok else {},
                                        diagnostics={"weights_entropy_mean": entropy, "divergence_context": 0.0} if ok else {}),
        first_divergent_stage="scaled_scores" if variant == "unscaled" and ok else None,
        findings=[Finding("scaling", "scaled_scores", "error", "no 1/sqrt(d_k)")] if variant == "unscaled" else [],
    )


def write_sweep(folder: Path, records: list[Record]) -> Path:
    for num, record in enumerate(records):
        write_record(record, folder / f"{num}-seed={record.seed},variant={record.variant.name}")
    return folder


@pytest.fixture
def sweep(tmp_path: Path) -> Path:
    return write_sweep(tmp_path / "sweep", [
        make_record("reference", 1, entropy=1.0), make_record("reference", 2, entropy=3.0),
        make_record("unscaled", 1, entropy=0.5), make_record("unscaled", 2, status="failed"),
    ])


def test_find_record_files_ignores_temp_files_and_duplicates(sweep: Path) -> None:
    (sweep / "0-seed=1,variant=reference" / ".record.json.abc.tmp").write_text("{")
    files = find_record_files([sweep, sweep / "0-seed=1,variant=reference", sweep / "1-seed=2,variant=reference" / "record.json"])
    assert len(files) == 4 and all(f.name == "record.json" for f in files)


def test_load_records_skips_unreadable_files_by_path(sweep: Path) -> None:
    bad = sweep / "9-bad" / "record.json"
    bad.parent.mkdir()
    bad.write_text('{"variant": "x", "se')
    records, problems = load_records(find_record_files([sweep]))
    assert len(records) == 4
    assert len(problems) == 1 and str(bad) in str(problems[0])


def test_jobs_table_is_one_row_per_job_in_variant_seed_order(sweep: Path) -> None:
    report = Report(load_records(find_record_files([sweep]))[0])
    assert list(report.jobs[["variant", "seed"]].itertuples(index=False, name=None)) == [
        ("reference", 1), ("reference", 2), ("unscaled", 1), ("unscaled", 2)
    ]
    assert [r.seed for r in report.records] == list(report.jobs["seed"])


def test_rows_of_a_size_sweep_are_ordered_numerically() -> None:
    records = [make_record("reference", 1, d_out=d) for d in (512, 8, 32, 2)]
    assert list(Report(records).jobs["d_out"]) == [2, 8, 32, 512]


def test_rows_of_a_sweep_over_any_config_number_are_ordered_numerically() -> None:
    """num_kv_heads is no size column: the config's numbers order the rows too (launch order was 8, 1, 4)."""
    records = []
    for kv_heads in (8, 1, 4):
        record = make_record("gqa", 1)
        record.config["num_kv_heads"] = kv_heads
        records.append(record)
    assert [r.config["num_kv_heads"] for r in Report(records).records] == [1, 4, 8]


def test_summary_is_mean_and_std_over_seeds_counting_failures(sweep: Path) -> None:
    jobs = Report(load_records(find_record_files([sweep]))[0]).jobs
    summary = summary_table(jobs)
    assert summary.loc["reference", ("weights_entropy_mean", "mean")] == pytest.approx(2.0)
    assert summary.loc["reference", ("weights_entropy_mean", "std")] == pytest.approx(np.sqrt(2.0))
    assert summary.loc["unscaled", ("jobs", "count")] == 2
    assert summary.loc["unscaled", ("failed", "count")] == 1
    assert summary.loc["unscaled", ("weights_entropy_mean", "mean")] == pytest.approx(0.5)
    view = summary_view(summary)
    assert view.loc["weights_entropy_mean", "reference"] == "2 ± 1.4"
    assert view.loc["weights_entropy_mean", "unscaled"] == "0.5"  # one ok seed: no std


def test_summary_groups_by_configuration_when_sizes_vary() -> None:
    jobs = Report([make_record("unscaled", s, d_out=d) for d in (2, 8) for s in (1, 2)]).jobs
    assert list(summary_table(jobs).index) == ["unscaled · d_out=2", "unscaled · d_out=8"]


def test_differs_hides_constant_columns_but_keeps_identity() -> None:
    jobs = pd.DataFrame({"variant": ["a", "a"], "seed": [1, 1], "d_in": [3, 3], "x": [1.0, 2.0], "path": ["p", "q"]})
    assert list(differs_table(jobs).columns) == ["variant", "seed", "x"]


def test_terminal_table_keeps_the_swept_keys_and_the_verdict(sweep: Path) -> None:
    report = Report(load_records(find_record_files([sweep]))[0])
    text = terminal_table(report.jobs, width=400)
    header = text.splitlines()[0].split()
    assert header[:2] == ["variant", "seed"] and "d_in" not in header  # constant: folded away
    assert {"status", "findings"} <= set(header)
    assert "boom" in text  # a failed job's error stands in its findings


def write_all(folder: Path):
    """What the table and HTML sinks write at the end of a sweep."""
    return lambda report: (TableSink().write_sweep(report, folder), HtmlSink().write_sweep(report, folder))


def test_rebuild_writes_csv_md_html_and_rereads_new_records(sweep: Path) -> None:
    report, problems = rebuild(sweep, write_all(sweep))
    assert not problems and len(report.records) == 4
    for suffix in (".csv", ".md", ".html"):
        assert (sweep / f"comparison{suffix}").stat().st_size > 0
    csv = pd.read_csv(sweep / "comparison.csv")
    assert len(csv) == 4 and list(csv.columns[:11]) == [
        "variant", "seed", "d_in", "d_out", "n_tokens", "inputs", "weights", "status", "error",
        "first_divergent_stage", "findings",
    ]
    write_sweep(sweep / "more", [make_record("unscaled", 3)])
    rebuild(sweep, write_all(sweep))
    assert len(pd.read_csv(sweep / "comparison.csv")) == 5


def test_markdown_has_the_three_views(sweep: Path, tmp_path: Path) -> None:
    report = Report(load_records(find_record_files([sweep]))[0])
    text = write_markdown_report(report, tmp_path / "out.md").read_text()
    assert "## Summary (mean ± std over seeds)" in text and "## What differs" in text and "## Every job" in text



def test_a_table_too_wide_for_the_terminal_is_cut_with_an_ellipsis_never_silently():
    """At COLUMNS=60 0.2609 was printed as 0.260 and the header as `|Δ output`; at 50
    the column went without a word."""
    import pandas as pd

    jobs = pd.DataFrame([{"variant": "wrong_softmax_axis", "seed": s, "status": "ok", "first_divergent_stage": "weights",
                          "findings": "softmax_axis", "divergence_output": d} for s, d in ((1, 0.2609), (3, 0.187))])
    wide = terminal_table(jobs, width=200).splitlines()
    assert wide[1].endswith("0.2609") and wide[2].endswith("0.187") and wide[0].endswith("|Δ output|")
    for width in (60, 50, 40):
        lines = terminal_table(jobs, width=width).splitlines()
        assert all(len(line) <= width for line in lines)
        for shown, whole in zip(lines, ("|Δ output|", "0.2609", "0.187")):
            assert shown.endswith(whole) or shown.endswith("…"), (width, shown)  # whole, or cut and marked
