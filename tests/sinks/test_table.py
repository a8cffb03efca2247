"""Records as tables: a job's reference-vs-variant rows and a sweep's row per job."""

from __future__ import annotations

import pytest

import attnlab
from attnlab.reporting.rows import KEY_COLUMNS, module_table, records_table


def test_module_table_has_the_reference_and_the_variant_with_diagnostics_columns():
    record = attnlab.run("wrong_softmax_axis").record
    table = module_table(record)
    assert list(table.index) == ["reference", "variant"]
    assert table.loc["reference", "variant"] == "reference" and table.loc["variant", "variant"] == "wrong_softmax_axis"
    assert set(record.variant.diagnostics) <= set(table.columns)
    assert table.loc["variant", "findings"] == "softmax_axis" and table.loc["reference", "findings"] == ""
    assert table.loc["reference", "divergence_context"] == 0.0 and table.loc["variant", "divergence_context"] > 0


@pytest.mark.slow
def test_records_table_is_one_row_per_job_sorted_by_variant_and_seed():
    records = [attnlab.run(v, seed=s).record for v in ("unscaled", "reference") for s in (2, 1)]
    table = records_table(records)
    assert list(zip(table["variant"], table["seed"])) == [("reference", 1), ("reference", 2), ("unscaled", 1), ("unscaled", 2)]
    assert set(KEY_COLUMNS) <= set(table.columns)
    assert list(table["first_divergent_stage"].fillna("none")) == ["none", "none", "scaled_scores", "scaled_scores"]


def test_the_jobs_csv_reads_back_as_the_dataframe_view(tmp_path):
    import numpy as np
    import pandas as pd

    from attnlab.reporting.rows import module_rows, rows_markdown, write_rows_csv

    record = attnlab.run("unscaled").record
    written = pd.read_csv(write_rows_csv(module_rows(record), tmp_path / "comparison.csv"), index_col="module")
    expected = module_table(record)
    assert list(written.columns) == list(expected.columns)
    np.testing.assert_allclose(written["divergence_weights"], expected["divergence_weights"])
    assert written.loc["variant", "findings"] == "scaling" and np.isnan(written.loc["reference", "first_divergent_stage"])
    markdown = rows_markdown(module_rows(record), transpose=True)
    assert "| first_divergent_stage" in markdown and "scaled_scores" in markdown


def test_a_sweep_without_records_writes_no_empty_table(tmp_path):
    """A sweep of training jobs holds no forward record: no 1-byte comparison.csv beside its tables."""
    from attnlab.reporting.aggregate import Report
    from attnlab.sinks.table import TableSink, write_csv_report

    write_csv_report(Report([]), tmp_path / "comparison.csv")
    TableSink().write_sweep(Report([]), tmp_path)
    assert list(tmp_path.iterdir()) == []
