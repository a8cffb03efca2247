"""attnlab's sweeper: validates a covering subset of a sweep's jobs, fails early on a bad value."""

from __future__ import annotations

import itertools
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from attnlab.aggregate import find_record_files
from attnlab.config import use_attnlab_sweeper

covering_jobs = use_attnlab_sweeper().covering_jobs


def grid(**values: list) -> list[tuple[str, ...]]:
    """The jobs of a basic sweep over `values`, in Hydra's order (the last key varies fastest)."""
    return list(itertools.product(*([f"{key}={v}" for v in vs] for key, vs in values.items())))


def test_every_override_of_the_sweep_is_in_some_validated_job() -> None:
    batch = grid(variant=["reference", "linear", "unscaled", "wrong_softmax_axis"], seed=[1, 2, 3, 4, 5])
    chosen = covering_jobs(batch)
    assert set().union(*chosen) == set().union(*batch)
    assert len(chosen) == 8  # reference x 5 seeds, then one job for each other variant
    assert chosen == [job for job in batch if job in chosen]  # the sweep's order, no job twice


def test_only_overrides_that_need_composing_pick_jobs() -> None:
    batch = grid(variant=["reference", "linear", "unscaled", "wrong_softmax_axis"], seed=[1, 2, 3, 4, 5])
    judged = []
    chosen = covering_jobs(batch, needs_compose=lambda o: judged.append(o) or o.startswith("variant="))
    assert chosen == [job for job in batch if job[1] == "seed=1"]  # one job per variant
    assert sorted(judged) == sorted(set().union(*batch))  # every override judged, once


def test_a_single_job_and_a_constant_override_are_validated_once() -> None:
    assert covering_jobs([("seed=1",)]) == [("seed=1",)]
    batch = grid(d_out=[2], seed=[1, 2, 3])
    assert covering_jobs(batch) == batch
    assert covering_jobs(grid(d_out=[2, 4], seed=[7])) == grid(d_out=[2, 4], seed=[7])


def sweep(tmp_path: Path, *overrides: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "attnlab", "-m", *overrides, f"hydra.sweep.dir={tmp_path / 'sweep'}"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=300)


@pytest.mark.slow
def test_a_bad_value_late_in_the_sweep_fails_before_any_job_runs(tmp_path) -> None:
    done = sweep(tmp_path, "variant=reference,unscaled", "seed=1,2", "d_out=2,x")
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [done.stderr.strip()]
    assert "d_out" in done.stderr and "'x'" in done.stderr and "Traceback" not in done.stderr
    assert find_record_files([tmp_path / "sweep"]) == []
    assert "sweep:" not in done.stdout  # no empty table for a sweep that ran nothing


@pytest.mark.slow
def test_the_basic_sweeper_gives_the_same_table(tmp_path) -> None:
    tables = {}
    for sweeper in ("attnlab", "basic"):
        out = tmp_path / sweeper
        out.mkdir()
        done = sweep(out, "variant=reference,unscaled", "seed=1,2", f"hydra/sweeper={sweeper}")
        assert done.returncode == 0, done.stderr
        tables[sweeper] = pd.read_csv(out / "sweep" / "comparison.csv").drop(columns=["path"])
    assert "AttnlabSweeper" in (tmp_path / "attnlab" / "sweep" / "multirun.yaml").read_text()
    assert "BasicSweeper" in (tmp_path / "basic" / "sweep" / "multirun.yaml").read_text()
    pd.testing.assert_frame_equal(tables["attnlab"], tables["basic"])


@pytest.mark.slow
def test_a_sweep_composes_each_job_once_plus_one_per_variant(tmp_path, monkeypatch) -> None:
    """Seeds are values checked on a copy of the config; only the variant choices are composed."""
    from hydra._internal.config_loader_impl import ConfigLoaderImpl

    from attnlab.cli import main as cli_main

    composed = []
    original = ConfigLoaderImpl.load_sweep_config
    monkeypatch.setattr(ConfigLoaderImpl, "load_sweep_config",
                        lambda self, master_config, sweep_overrides: composed.append(tuple(sweep_overrides))
                        or original(self, master_config, sweep_overrides))
    code = cli_main(["-m", "variant=reference,unscaled", "seed=1,2,3", "log.tensorboard=false", "log.terminal=false",
                     f"hydra.sweep.dir={tmp_path / 'sweep'}"])
    assert code == 0
    assert len(composed) == 6 + 2 and len(find_record_files([tmp_path / "sweep"])) == 6
