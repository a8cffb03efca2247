"""attnlab's sweeper: validates a covering subset of a sweep's jobs, fails early on a bad value."""

from __future__ import annotations

import itertools
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from omegaconf import OmegaConf

from attnlab.reporting.aggregate import find_record_files
from hydra_plugins.attnlab_sweeper.attnlab_sweeper import covering_jobs


def grid(**values: list) -> list[tuple[str, ...]]:
    """The jobs of a basic sweep over `values`, in Hydra's order (the last key varies fastest)."""
    return list(itertools.product(*([f"{key}={v}" for v in vs] for key, vs in values.items())))


def is_group(line: str) -> bool:
    return line.startswith(("variant=", "inputs="))


def test_one_job_per_config_group_choice_is_composed() -> None:
    batch = grid(variant=["reference", "linear", "unscaled", "wrong_softmax_axis"], seed=[1, 2, 3, 4, 5])
    chosen = covering_jobs(batch, is_group)
    assert chosen == [job for job in batch if job[1] == "seed=1"]  # one job per variant, in the sweep's order


def test_a_sweep_of_values_only_composes_nothing() -> None:
    assert covering_jobs(grid(d_out=[2, 4], seed=[7, 8]), is_group) == []
    assert covering_jobs(grid(inputs=["random"], seed=[1, 2]), is_group) == [("inputs=random", "seed=1")]


def sweep(tmp_path: Path, *overrides: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "attnlab", "-m", *overrides, f"hydra.sweep.dir={tmp_path / 'sweep'}"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=300)


@pytest.mark.slow
def test_a_bad_value_late_in_the_sweep_fails_before_any_job_runs(tmp_path) -> None:
    done = sweep(tmp_path, "variant=reference,unscaled", "seed=1,2", "d_out=2,x")
    assert done.returncode == 2
    assert done.stderr == "attnlab: error: d_out=x: must be a positive integer (1, 2, 3, ...)\n"
    assert not (tmp_path / "sweep").exists()  # not even multirun.yaml: the folder is made after the checks
    assert "sweep:" not in done.stdout  # no empty table for a sweep that ran nothing


@pytest.mark.slow
@pytest.mark.parametrize("values,single", [(["d_out=2,0"], "d_out=0"), (["seed=1,-2"], "seed=-2"),
                                           (["inputs=random", "inputs.n_tokens=4,0"], "inputs.n_tokens=0"),
                                           (["+num_head=1,2"], "+num_head=1")])
def test_a_range_error_anywhere_in_a_sweep_is_the_single_runs_error_before_any_job(app, tmp_path, values, single):
    """Every value is checked before job 0 runs, with the same one line as a single run."""
    done = sweep(tmp_path, "variant=reference,unscaled", *values)
    alone = app(*[v for v in values if "," not in v], single)
    assert done.returncode == alone.returncode == 2, done.stderr
    assert done.stderr.strip().splitlines() == alone.stderr.strip().splitlines() and len(alone.stderr.splitlines()) == 1
    assert not (tmp_path / "sweep").exists() and "Launching" not in done.stderr


ANOTHER_APP_FIRST = """
import sys
from pathlib import Path
import hydra
from omegaconf import DictConfig

ran = []
folder = sys.argv[1]

@hydra.main(config_path=None, version_base="1.3")
def other_app(cfg: DictConfig) -> None:
    ran.append(True)

sys.argv = ["other_app", f"hydra.run.dir={folder}/other"]
other_app()
assert ran

from attnlab.app.cli import main
code = main(["-m", "variant=reference,unscaled", "log.tensorboard=false", f"hydra.sweep.dir={folder}/sweep"])
print("exit", code)
"""


@pytest.mark.slow
def test_a_sweep_runs_in_a_process_where_another_hydra_app_ran_first(tmp_path) -> None:
    """Hydra scans for plugins once per process: attnlab registers its sweeper itself."""
    done = subprocess.run([sys.executable, "-c", ANOTHER_APP_FIRST, str(tmp_path)], cwd=tmp_path,
                          capture_output=True, text=True, timeout=300)
    assert "exit 0" in done.stdout, done.stderr
    assert len(find_record_files([tmp_path / "sweep"])) == 2 and (tmp_path / "sweep" / "comparison.csv").exists()


@pytest.mark.slow
def test_the_basic_sweeper_gives_the_same_table_and_job_configs(tmp_path) -> None:
    """Hydra's basic sweeper composes every job itself: attnlab's, composing each variant once,
    writes the same job configs (a group, a value swept, a value set, a key in no folder name)."""
    tables, files = {}, {}
    for sweeper in ("attnlab", "basic"):
        out = tmp_path / sweeper
        out.mkdir()
        done = sweep(out, "variant=reference,unscaled", "seed=1,2", "inputs=random", "inputs.n_tokens=4",
                     "log.html=false", f"hydra/sweeper={sweeper}")
        assert done.returncode == 0, done.stderr
        tables[sweeper] = pd.read_csv(out / "sweep" / "comparison.csv").drop(columns=["path"])
        files[sweeper] = {path.relative_to(out).as_posix(): job_file(path, out, sweeper)
                          for path in sorted((out / "sweep").glob("*/.hydra/*.yaml"))}
    assert "AttnlabSweeper" in (tmp_path / "attnlab" / "sweep" / "multirun.yaml").read_text()
    assert "BasicSweeper" in (tmp_path / "basic" / "sweep" / "multirun.yaml").read_text()
    pd.testing.assert_frame_equal(tables["attnlab"], tables["basic"])
    assert len(files["attnlab"]) == 4 * 3 and "sweep/0-inputs.n_tokens=4,inputs=random,seed=1,variant=reference/" \
        ".hydra/overrides.yaml" in files["attnlab"]
    assert files["attnlab"] == files["basic"]


def job_file(path: Path, out: Path, sweeper: str) -> bytes:
    """A job's config.yaml or overrides.yaml as written; its hydra.yaml without what names the
    sweeper and the sweep's folder."""
    if path.name != "hydra.yaml":
        return path.read_bytes()
    config = OmegaConf.create(path.read_text().replace(str(out), "OUT"))
    assert config.hydra.runtime.choices["hydra/sweeper"] == sweeper
    for key in ("sweeper", "overrides.hydra", "runtime.choices.hydra/sweeper"):
        OmegaConf.update(config.hydra, key, None)
    return OmegaConf.to_yaml(config).encode()


@pytest.mark.slow
def test_a_sweep_composes_once_per_variant(tmp_path, monkeypatch) -> None:
    """Seeds are values applied to a copy of the config (for the checks and for the jobs alike);
    only the variant choices are composed, once each."""
    from hydra._internal.config_loader_impl import ConfigLoaderImpl

    from attnlab.app.cli import main as cli_main

    composed = []
    original = ConfigLoaderImpl.load_sweep_config
    monkeypatch.setattr(ConfigLoaderImpl, "load_sweep_config",
                        lambda self, master_config, sweep_overrides: composed.append(tuple(sweep_overrides))
                        or original(self, master_config, sweep_overrides))
    code = cli_main(["-m", "variant=reference,unscaled", "seed=1,2,3", "log.tensorboard=false", "log.terminal=false",
                     f"hydra.sweep.dir={tmp_path / 'sweep'}"])
    assert code == 0
    assert composed == [("variant=reference",), ("variant=unscaled",)]
    assert len(find_record_files([tmp_path / "sweep"])) == 6


@pytest.mark.slow
def test_with_the_basic_sweeper_a_range_error_is_its_jobs_failed_row_and_exit_code_1(tmp_path) -> None:
    """The README said the basic sweeper's exit code stays 0; it is 1, as attnlab's."""
    done = sweep(tmp_path, "variant=reference", "d_out=2,0", "hydra/sweeper=basic")
    assert done.returncode == 1, done.stderr
    table = pd.read_csv(tmp_path / "sweep" / "comparison.csv")
    assert sorted(table["status"]) == ["failed", "ok"]
