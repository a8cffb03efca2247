"""attnlab.sweep from Python: the grid's jobs, and the table `attnlab compare` builds."""

from __future__ import annotations

import subprocess
import sys

import pandas as pd
import pytest

import attnlab
from attnlab.errors import UserError
from attnlab.reporting.aggregate import Report, find_record_files, load_records


def test_a_sweep_runs_every_combination_in_the_clis_order():
    swept = attnlab.sweep(variant=["reference", "unscaled"], seed=[1, 2], progress=False)
    assert [(r.record.variant.name, r.record.seed) for r in swept.results] == [
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


@pytest.mark.slow
def test_a_grid_with_bad_jobs_is_refused_whole_before_the_first_job(tmp_path):
    """The first job is good; the third and fourth are not (d_out=6 is not a multiple of num_heads=4,
    num_kv_heads=3 does not divide num_heads=4): nothing runs, and both reasons are said."""
    with pytest.raises(UserError) as refused:
        attnlab.sweep(variant="gqa", num_heads=[2, 4], d_out=[8, 6], num_kv_heads=[1], progress=False,
                      out_dir=tmp_path / "grid")
    lines = str(refused.value).splitlines()
    assert any("d_out=6" in line and "num_heads=4" in line for line in lines), lines
    assert len(lines) == len(set(lines)) >= 1
    assert not list(tmp_path.rglob("record.json"))
    with pytest.raises(UserError, match="num_kv_heads=3"):
        attnlab.sweep(variant="gqa", num_heads=4, d_out=8, num_kv_heads=[1, 3], progress=False, out_dir=tmp_path / "kv")
    assert not list(tmp_path.rglob("record.json"))


@pytest.mark.slow
def test_a_sweep_into_a_folder_ends_as_a_cli_sweep_with_runs_shared_per_variant(tmp_path):
    """The folder gets the comparison pages, and TensorBoard gets a run per variant holding its jobs
    at their numbers, not a run per job (more than 40 runs open TensorBoard on nothing)."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    attnlab.sweep(variant=["reference", "unscaled"], seed=[1, 2], out_dir=tmp_path, progress=False)
    assert {"comparison.csv", "comparison.md", "comparison.html"} <= {p.name for p in tmp_path.iterdir()}
    runs = sorted({p.parent.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("events.out.tfevents.*")})
    assert runs == ["reference", "unscaled"]
    steps = EventAccumulator(str(tmp_path / "unscaled")).Reload().Scalars("divergence/context")
    assert sorted(point.step for point in steps) == [2, 3]


def test_a_sweeps_result_shows_each_job_and_its_table_in_a_notebook():
    """It showed only a count: "SweepResult(2 results; .table: 2 rows)"."""
    done = attnlab.sweep(variant=["unscaled", "wrong_softmax_axis"], progress=False)
    shown = repr(done)
    assert "variant='unscaled'" in shown and "variant='wrong_softmax_axis'" in shown
    page = done._repr_html_()
    assert page.count("<tr>") >= 3 and "wrong_softmax_axis" in page and "scaled_scores" in page


def test_several_seeds_are_a_list_with_a_notebook_view_and_a_table():
    """n_seeds > 1 returned a bare list that printed its items' reprs on one line and had no table."""
    results = attnlab.run("unscaled", 1, n_seeds=2, log={"tensorboard": False, "table": False, "html": False,
                                                         "terminal": False})
    assert isinstance(results, list) and [r.record.seed for r in results] == [1, 2]
    assert list(results.table["seed"]) == [1, 2]
    assert repr(results).count("Result(variant='unscaled'") == 2
    page = results._repr_html_()
    assert page.count("scaling") >= 2  # each seed's findings


def test_a_sweeps_progress_is_on_stdout_not_jupyters_pink_stderr(capsys):
    attnlab.sweep(variant=["unscaled"], seed=[1, 2])
    shown = capsys.readouterr()
    assert "attnlab.sweep [" in shown.out and "2/2" in shown.out and "attnlab.sweep" not in shown.err


def test_a_dict_value_names_a_jobs_folder_by_its_keys_not_its_repr():
    from attnlab.app.api_sweep import _job_dir

    def zero_head(context):
        return context

    assert _job_dir(3, {"layer": 1, "intervene": {"name": "ablate_head", "head": 0}}) == \
        "3-intervene=ablate_head,intervene.head=0,layer=1"
    assert _job_dir(0, {"intervene": {"name": "function", "function": zero_head}}) == \
        "0-intervene=function,intervene.function=zero_head"
