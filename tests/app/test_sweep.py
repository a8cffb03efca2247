"""Sweeps through the real Hydra app in a subprocess: tables after every job, failures isolated,
Ctrl-C safe, the same numbers from every launcher, and the experiment presets.

Each subprocess pays ~5 s of imports (torch, hydra), so sweeps are small: book inputs, 2 x 2.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from attnlab.app.cli import main as cli_main
from attnlab.modules.registry import discover
from attnlab.record import read_record
from attnlab.reporting.aggregate import find_record_files

pytestmark = pytest.mark.slow

QUIET = ["log.terminal=false", "log.tensorboard=false"]
SMALL_SWEEP = ["variant=reference,unscaled", "seed=1,2"]
KEY_COLUMNS = ["variant", "seed", "d_in", "d_out", "n_tokens", "inputs", "weights", "status", "error",
               "first_divergent_stage", "findings"]

PLUGINS = {
    "raises": '''
import torch
import torch.nn as nn
class Raises(nn.Module):
    def __init__(self, d_in, d_out):
        super().__init__()
        self.W_query = nn.Parameter(torch.rand(d_in, d_out))
    def forward(self, x):
        raise RuntimeError("boom from the plugin")
''',
    "wrong_shape": '''
import torch
import torch.nn as nn
class WrongShape(nn.Module):
    def __init__(self, d_in, d_out):
        super().__init__()
        self.W_query = nn.Parameter(torch.rand(d_in, d_out))
    def forward(self, x):
        return torch.zeros(3, 3, 3)
''',
    "nan_weights": '''
import torch
import torch.nn as nn
class NanWeights(nn.Module):
    def __init__(self, d_in, d_out):
        super().__init__()
        self.W_query = nn.Parameter(torch.rand(d_in, d_out))
        self.W_key = nn.Parameter(torch.rand(d_in, d_out))
        self.W_value = nn.Parameter(torch.rand(d_in, d_out))
    def forward(self, x):
        keys, queries, values = x @ self.W_key, x @ self.W_query, x @ self.W_value
        weights = torch.softmax(queries @ keys.T * float("nan"), dim=-1)
        return weights @ values
''',
    "sleepy": '''
import time
import torch
import torch.nn as nn
class Sleepy(nn.Module):
    def __init__(self, d_in, d_out):
        super().__init__()
        self.W_query = nn.Parameter(torch.rand(d_in, d_out))
    def forward(self, x):
        open("sleeping", "w").close()  # in the sweep's working folder: the test signals only once the job is here
        time.sleep(30)
        return x @ self.W_query
''',
}


def app(sweep_dir: Path, *overrides: str, plugins: Path | None = None) -> list[str]:
    return [sys.executable, "-m", "attnlab", "-m", *overrides, *QUIET, f"hydra.sweep.dir={sweep_dir}"]


def environment(plugins: Path | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("ATTNLAB_PLUGIN_PATH", "ATTNLAB_TRACEBACK")}
    if plugins is not None:
        env["ATTNLAB_PLUGIN_PATH"] = str(plugins)
    return env


def run_app(sweep_dir: Path, *overrides: str, plugins: Path | None = None, timeout: int = 120) -> subprocess.CompletedProcess:
    return subprocess.run(app(sweep_dir, *overrides), capture_output=True, text=True, timeout=timeout,
                          cwd=sweep_dir.parent, env=environment(plugins))


@pytest.fixture(scope="module")
def plugin_dir(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("plugins")
    for name, source in PLUGINS.items():
        (folder / f"{name}.py").write_text(source)
    return folder


@pytest.fixture(scope="module")
def basic_sweep(tmp_path_factory) -> tuple[Path, subprocess.CompletedProcess]:
    sweep_dir = tmp_path_factory.mktemp("basic") / "sweep"
    return sweep_dir, run_app(sweep_dir, *SMALL_SWEEP)


def without_paths(table: pd.DataFrame) -> pd.DataFrame:
    return table.drop(columns=[c for c in table.columns if c == "path" or c.endswith("_dir")])


def test_sweep_writes_the_three_tables_with_one_row_per_job(basic_sweep) -> None:
    sweep_dir, done = basic_sweep
    assert done.returncode == 0, done.stderr
    table = pd.read_csv(sweep_dir / "comparison.csv")
    assert len(table) == 4 and list(table.columns[: len(KEY_COLUMNS)]) == KEY_COLUMNS
    assert "weights_entropy_mean" in table.columns
    assert set(table.loc[table["variant"] == "unscaled", "first_divergent_stage"]) == {"scaled_scores"}
    assert table.loc[table["variant"] == "reference", "first_divergent_stage"].isna().all()
    assert (sweep_dir / "comparison.md").read_text().startswith("# attnlab comparison")
    assert "data:image/png;base64," in (sweep_dir / "comparison.html").read_text()
    terminal = done.stdout[done.stdout.index("sweep: 4 job(s)"):]
    assert "unscaled" in terminal and "|Δ output|" in terminal and "comparison.csv" in terminal


def test_failing_plugins_get_their_rows_and_the_exit_code_is_not_zero(tmp_path, plugin_dir) -> None:
    sweep_dir = tmp_path / "sweep"
    done = run_app(sweep_dir, "variant=reference,raises,wrong_shape,nan_weights", plugins=plugin_dir)
    assert done.returncode != 0
    table = pd.read_csv(sweep_dir / "comparison.csv").set_index("variant")
    assert table.loc["reference", "status"] == "ok"
    assert table.loc["raises", "status"] == "failed" and "boom from the plugin" in table.loc["raises", "error"]
    assert table.loc["wrong_shape", "status"] == "failed" and "(3, 3, 3)" in table.loc["wrong_shape", "error"]
    assert "non_finite" in table.loc["nan_weights", "findings"]
    assert "sweep: 4 job(s)" in done.stdout  # the table was printed before the failing exit
    assert "2 failed record(s)" in done.stderr


def wait_for(predicate, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.1)


def test_ctrl_c_keeps_finished_records_and_compare_rebuilds_the_table(tmp_path, plugin_dir, capsys) -> None:
    sweep_dir = tmp_path / "sweep"
    process = subprocess.Popen(app(sweep_dir, "variant=reference,sleepy", "seed=1,2"), cwd=tmp_path,
                               env=environment(plugin_dir), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        wait_for(lambda: len(find_record_files([sweep_dir])) == 2 if sweep_dir.exists() else False)
        wait_for(lambda: (tmp_path / "sleeping").exists())  # inside the sleeping job's forward, its handlers set
        process.send_signal(signal.SIGINT)
        _, err = process.communicate(timeout=30)
    finally:
        process.kill()
    assert process.returncode == 130, err
    files = find_record_files([sweep_dir])
    assert len(files) == 2 and all(json.loads(f.read_text())["variant"] == "reference" for f in files)
    (sweep_dir / "comparison.csv").unlink()
    assert cli_main(["compare", str(sweep_dir), "--out", str(sweep_dir / "comparison.csv")]) == 0
    assert list(pd.read_csv(sweep_dir / "comparison.csv")["seed"]) == [1, 2]


def stage_values(sweep_dir: Path) -> dict[tuple[str, int], dict[str, np.ndarray]]:
    records = [read_record(f) for f in find_record_files([sweep_dir])]
    return {(r.variant.name, r.seed): r.variant.stages for r in records}


@pytest.mark.parametrize("launcher", [
    ["hydra/launcher=joblib", "hydra.launcher.n_jobs=2"],
    ["hydra/launcher=submitit_local", "hydra.launcher.timeout_min=5", "hydra.launcher.cpus_per_task=1"],
], ids=["joblib", "submitit_local"])
def test_every_launcher_gives_the_same_table_and_bitwise_stage_values(basic_sweep, tmp_path, launcher) -> None:
    """One seed of the basic sweep (worker start-up dominates: ~5 s per process on 2 CPUs)."""
    basic_dir, _ = basic_sweep
    sweep_dir = tmp_path / "sweep"
    done = run_app(sweep_dir, "variant=reference,unscaled", "seed=1", *launcher)
    assert done.returncode == 0, done.stderr
    basic = pd.read_csv(basic_dir / "comparison.csv").query("seed == 1").reset_index(drop=True)
    pd.testing.assert_frame_equal(without_paths(pd.read_csv(sweep_dir / "comparison.csv")), without_paths(basic))
    expected, observed = stage_values(basic_dir), stage_values(sweep_dir)
    assert observed.keys() == {("reference", 1), ("unscaled", 1)}
    for key, stages in observed.items():
        assert stages.keys() == expected[key].keys()
        for name, values in stages.items():
            assert values.tobytes() == expected[key][name].tobytes(), (key, name)
    assert "sweep: 2 job(s)" in done.stdout  # results came back through the files


def test_all_variants_sweeps_every_registered_variant(tmp_path) -> None:
    sweep_dir = tmp_path / "sweep"
    registered = discover().names()
    done = run_app(sweep_dir, "+experiment=all_variants", "seed=1")
    table = pd.read_csv(sweep_dir / "comparison.csv")
    assert sorted(table["variant"]) == registered  # every variant, through glob(*) over the group
    assert done.returncode == 0, done.stderr


def test_dk_scaling_shows_the_entropy_collapse_without_scaling(tmp_path) -> None:
    sweep_dir = tmp_path / "sweep"
    done = run_app(sweep_dir, "+experiment=dk_scaling", "seed=1", "d_out=2,32,512", "inputs.n_tokens=32")
    assert done.returncode == 0, done.stderr
    entropy = pd.read_csv(sweep_dir / "comparison.csv").pivot(index="d_out", columns="variant",
                                                               values="weights_entropy_mean")
    assert list(entropy.index) == [2, 32, 512]
    assert entropy.loc[512, "unscaled"] < 0.1 * entropy.loc[2, "unscaled"]  # collapses
    assert entropy.loc[512, "reference"] > 5 * entropy.loc[512, "unscaled"]  # scaled: far from collapse
    assert entropy.loc[512, "reference"] > 0.9 * entropy.loc[2, "reference"]  # scaled: level
    assert (entropy["reference"] > entropy["unscaled"]).all()


def test_the_summary_counts_jobs_and_names_their_records_where_a_job_has_several(tmp_path):
    """A model sweep's job writes a record per layer: `sweep: 2 job(s), 4 records`, not `4 job(s)`."""
    from attnlab.app.sweep import _counted
    from attnlab.record import Record, Side

    paths = [tmp_path / "0-layer=all" / "layer-0" / "record.json", tmp_path / "0-layer=all" / "layer-1" / "record.json",
             tmp_path / "1-layer=all" / "layer-0" / "record.json", tmp_path / "1-layer=all" / "layer-1" / "record.json"]

    class Report:  # what _counted reads of attnlab.reporting.aggregate.Report
        records = [Record(variant=Side("reference"), seed=0, config={}, path=path) for path in paths]

    assert _counted(Report(), tmp_path) == "2 job(s), 4 records"
    Report.records = Report.records[::2]
    assert _counted(Report(), tmp_path) == "2 job(s)"
