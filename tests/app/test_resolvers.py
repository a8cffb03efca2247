"""The config's own resolvers: a run's or a sweep's folder is never one another already took, and a
sweep job's folder name is one bounded path component."""

from __future__ import annotations

import datetime as dt
import subprocess
import sys
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import pytest

from attnlab.app.resolvers import JOB_DIRNAME_MAX, job_dirname, new_dir, run_name


def test_new_dir_takes_the_path_then_numbered_ones(tmp_path):
    path = str(tmp_path / "runs" / "13-16-01-unscaled")
    assert [new_dir(path) for _ in range(3)] == [path, path + "-2", path + "-3"]
    assert all((tmp_path / "runs" / name).is_dir() for name in ("13-16-01-unscaled", "13-16-01-unscaled-2"))


def test_racing_processes_each_get_their_own_folder(tmp_path):
    path = str(tmp_path / "same-second")
    with ProcessPoolExecutor(4) as pool:
        taken = list(pool.map(new_dir, [path] * 8))
    assert len(set(taken)) == 8


def take_the_next_minute(root, name: str) -> list:
    """Every folder `root/<date>/<time><name>` a run could be named for the next minute, taken."""
    now = dt.datetime.now()
    taken = [root / f"{t:%Y-%m-%d}" / f"{t:%H-%M-%S}{name}" for t in (now + dt.timedelta(seconds=s) for s in range(60))]
    for folder in taken:
        folder.mkdir(parents=True)
        (folder / "record.json").write_text("{}")
    return taken


def run_app(tmp_path, *args: str) -> None:
    done = subprocess.run([sys.executable, "-m", "attnlab", *args, "log.tensorboard=false"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr


def new_records(tmp_path) -> list:
    return [p for p in (tmp_path / "runs").rglob("record.json") if p.read_text() != "{}"]


@pytest.mark.slow
def test_a_run_in_a_taken_second_keeps_the_other_runs_folder(tmp_path):
    taken = take_the_next_minute(tmp_path / "runs", "-unscaled")
    run_app(tmp_path, "variant=unscaled")
    assert all((folder / "record.json").read_text() == "{}" for folder in taken)
    (record,) = new_records(tmp_path)
    assert record.parent.name.endswith("-unscaled-2")


@pytest.mark.slow
def test_a_sweep_in_a_taken_second_keeps_the_other_sweeps_folder(tmp_path):
    taken = take_the_next_minute(tmp_path / "runs" / "multirun", "")
    run_app(tmp_path, "-m", "variant=reference,unscaled")
    assert all((folder / "record.json").read_text() == "{}" for folder in taken)
    records = new_records(tmp_path)
    assert len(records) == 2 and {r.parent.parent.name[-2:] for r in records} == {"-2"}
    assert (records[0].parent.parent / "comparison.csv").exists()


def test_a_job_folder_name_is_one_bounded_component_and_distinct_per_overrides() -> None:
    assert job_dirname("seed=1,variant=scaled") == "seed=1,variant=scaled"  # a plain name is Hydra's
    names = [job_dirname(text) for text in ("inputs.path=x/../a.csv", "inputs.path=/etc/a.csv", "inputs.text=" + "é" * 300,
                                            "inputs.text=" + "a" * 300, "inputs.text=" + "a" * 299 + "b")]
    for name in names:
        assert "/" not in name and ".." not in name and len(name.encode()) <= JOB_DIRNAME_MAX
    assert len(set(names)) == len(names)


def test_a_run_folder_named_after_an_hf_variant_has_no_colon(tmp_path):
    """`variant=hf:gemma2` names the folder; a colon is refused in file names on Windows."""
    made = new_dir(str(tmp_path / "runs" / "18-40-00-hf:gemma2"))
    assert Path(made).name == "18-40-00-hf-gemma2" and Path(made).is_dir()


@pytest.mark.parametrize("intervene, name", [
    ({}, "reference"),
    ({"name": "ablate_head", "head": 3, "mode": "zero"}, "ablate_head-head=3-mode=zero"),
    ({"name": "scale_scores", "head": 2, "factor": 0.5, "mode": "zero"}, "scale_scores-head=2-factor=0.5"),
    ({"name": "patch", "head": 0, "text": "Each effort moves you"}, "patch-head=0"),
    ({"name": "function", "function": "my_edits:zero_head"}, "function-function=zero_head"),
    ({"name": "observe"}, "observe"),
    ({"name": "ablate_head", "head": [0, 3], "mode": "zero"}, "ablate_head-head=[0,3]-mode=zero"),
    ({"name": "ablate_head", "head": "all", "mode": "zero"}, "ablate_head-head=all-mode=zero"),
])
def test_a_run_under_an_intervention_is_named_by_its_edit_not_reference(intervene, name):
    assert run_name("reference", intervene) == name
