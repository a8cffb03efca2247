"""A plain (non-editable) install ships the configs and the built-in plugins and runs anywhere."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from tests.conftest import REPO

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", str(REPO), "--no-deps", "--no-build-isolation", "-q", "-w", str(out)],
        check=True, capture_output=True, text=True,
    )
    (built,) = out.glob("attnlab-*.whl")
    return built


def test_the_wheel_holds_configs_and_builtin_plugins(wheel):
    names = set(zipfile.ZipFile(wheel).namelist())
    for expected in ["attnlab/conf/config.yaml", "attnlab/conf/inputs/book.yaml", "attnlab/conf/inputs/random.yaml",
                     "attnlab/plugins/variants/reference.py", "attnlab/plugins/variants/linear.py",
                     "attnlab/plugins/variants/unscaled.py", "attnlab/plugins/variants/wrong_softmax_axis.py",
                     "attnlab/plugins/mistakes/mha_head_merge.py", "attnlab/plugins/modern/gqa.py",
                     "attnlab/plugins/implementations/impl_sdpa.py", "attnlab/plugins/mistakes/__init__.py", "attnlab/app/cli.py",
                     "hydra_plugins/attnlab_sweeper/attnlab_sweeper.py", "attnlab/conf/sink/terminal.yaml"]:
        assert expected in names, expected
    entry_points = next(n for n in names if n.endswith("entry_points.txt"))
    assert "attnlab = attnlab.__main__:main" in zipfile.ZipFile(wheel).read(entry_points).decode()


def test_the_installed_wheel_runs_from_any_folder(wheel, tmp_path):
    site = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "-q", "--target", str(site), str(wheel)],
                   check=True, capture_output=True)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = {**os.environ, "PYTHONPATH": str(site)}
    probe = subprocess.run([sys.executable, "-c", "import attnlab; print(attnlab.__file__)"], cwd=elsewhere, env=env,
                           capture_output=True, text=True, check=True)
    assert probe.stdout.strip().startswith(str(site))
    proc = subprocess.run([sys.executable, "-m", "attnlab", "variant=unscaled", "hydra.run.dir=out", "log.tensorboard=false"],
                          cwd=elsewhere, env=env, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert json.loads((elsewhere / "out" / "record.json").read_text())["first_divergent_stage"] == "scaled_scores"
    sweep = subprocess.run([sys.executable, "-m", "attnlab", "-m", "variant=reference,unscaled", "hydra.sweep.dir=sweep",
                            "log.tensorboard=false"], cwd=elsewhere, env=env, capture_output=True, text=True)
    assert sweep.returncode == 0, sweep.stderr
    assert "AttnlabSweeper" in (elsewhere / "sweep" / "multirun.yaml").read_text()
    assert len(list((elsewhere / "sweep").rglob("record.json"))) == 2


@pytest.mark.slow
def test_an_attnlab_folder_in_the_working_directory_does_not_shadow_the_package(tmp_path):
    """With the editable install's finder, a folder named `attnlab` here (the parent of a
    clone, a sweep folder of that name) was imported as a namespace package and every plugin failed."""
    (tmp_path / "attnlab" / "x").mkdir(parents=True)
    run = subprocess.run([sys.executable, "-m", "attnlab", "variant=unscaled", "log.tensorboard=false", "log.html=false",
                          "hydra.run.dir=out"], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    assert "warning" not in run.stderr and "[scaling @ scaled_scores]" in run.stdout
