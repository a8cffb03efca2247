"""Which TensorBoard run a sweep's job writes to: few enough runs that TensorBoard selects them all."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from attnlab.sinks.tensorboard_runs import RUNS_SELECTED_BY_DEFAULT, run_folder_name, run_keys


def sweep_dir(tmp_path: Path, *task: str, params: dict | None = None) -> Path:
    """A sweep folder whose multirun.yaml holds `task` as Hydra saves a command line's overrides."""
    hydra = {"sweeper": {"params": params or {}}, "overrides": {"task": list(task), "hydra": ["hydra.mode=MULTIRUN"]}}
    (tmp_path / "multirun.yaml").write_text(yaml.safe_dump({"hydra": hydra}))
    return tmp_path


def test_tensorboards_limit_is_forty_runs():
    assert RUNS_SELECTED_BY_DEFAULT == 40


@pytest.mark.parametrize(("task", "keys"), [
    (["variant=reference,unscaled", "seed=1,2,3"], ()),  # a run per variant, its seeds the jobs in it
    (["variant=a,b,c", "seed=1,2,3", "d_out=2,4,8"], ("d_out",)),  # 9 configurations + 3 curve runs
    (["variant=a,b,c", "seed=range(1,4)", "d_out=2,4,8", "inputs.n_tokens=4,5,6"], ()),  # 27 + 18 curve runs > 40
    (["variant=a,b", "d_out=2,4", "inputs=random,book"], ("d_out", "inputs.kind")),  # 8 + 4 curve runs
    (["variant=a", "variant.params.window=2,3"], ("variant.params.window",)),
    (["variant=glob(*)", "d_out=2,4"], ()),  # the options of a glob are not on the command line
])
def test_a_job_shares_a_run_with_its_configuration_while_the_sweeps_runs_fit(tmp_path, task, keys):
    assert run_keys(sweep_dir(tmp_path, *task)) == keys


def test_an_experiments_swept_params_count_as_the_command_lines(tmp_path):
    folder = sweep_dir(tmp_path, "seed=1,2", params={"variant": "a,b", "num_kv_heads": "1,2,4"})
    assert run_keys(folder) == ("num_kv_heads",)


def test_a_folder_without_multirun_yaml_shares_a_run_per_variant(tmp_path):
    assert run_keys(tmp_path) == ()


def test_a_runs_folder_name_is_its_label_without_spaces():
    assert run_folder_name("gqa d_out=8 inputs.kind=random") == "gqa,d_out=8,inputs.kind=random"
    assert run_folder_name("gqa · path=/a/b") == "gqa,path=_a_b"
    assert run_folder_name("ablate_head(head=0, mode=zero) layer=0") == "ablate_head,head=0,mode=zero,layer=0"
