"""attnlab.sweep from Python: the grid's jobs, and the table `attnlab compare` builds."""

from __future__ import annotations

import subprocess
import sys

import pandas as pd
import pytest

import attnlab
from attnlab.reporting.aggregate import Report, find_record_files, load_records


def test_a_sweep_runs_every_combination_in_the_clis_order():
    swept = attnlab.sweep(variant=["reference", "unscaled"], seed=[1, 2], progress=False)
    assert [(r.record.variant, r.record.seed) for r in swept.results] == [
        ("reference", 1), ("reference", 2), ("unscaled", 1), ("unscaled", 2)]
    assert list(swept.table["variant"]) == ["reference", "reference", "unscaled", "unscaled"]
    assert list(swept.table["first_divergent_stage"].fillna("")) == ["", "", "scaled_scores", "scaled_scores"]


@pytest.mark.slow
def test_the_table_equals_the_cli_sweeps(tmp_path):
    swept = attnlab.sweep(variant=["reference", "unscaled"], seed=[1, 2], out_dir=tmp_path / "api", progress=False)
    cli = subprocess.run([sys.executable, "-m", "attnlab", "-m", "variant=reference,unscaled", "seed=1,2",
                          f"hydra.sweep.dir={tmp_path / 'cli'}"], capture_output=True, text=True, timeout=300)
    assert cli.returncode == 0, cli.stderr
    records, problems = load_records(find_record_files([tmp_path / "cli"]))
    table = Report(records).jobs
    assert not problems and len(table) == 4
    # each job's folder is named as the CLI names it; only the sweep folder differs
    assert [p.removeprefix(str(tmp_path / "api")) for p in swept.table["path"]] == \
           [p.removeprefix(str(tmp_path / "cli")) for p in table["path"]]
    pd.testing.assert_frame_equal(swept.table.drop(columns="path"), table.drop(columns="path"))
