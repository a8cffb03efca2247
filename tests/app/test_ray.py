"""The Ray preset (conf/hydra/launcher/ray_cluster.yaml) on a local Ray cluster gives the basic launcher's
table. Runs where the optional extra is installed (pip install -e '.[ray]'); skipped elsewhere."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(importlib.util.find_spec("hydra_plugins.hydra_ray_launcher") is None,
                       reason="the ray extra is not installed (pip install -e '.[ray]')"),
]


def test_a_sweep_on_a_local_ray_cluster_gives_the_basic_launchers_table(tmp_path: Path) -> None:
    tables = {}
    for launcher in ("basic", "ray_cluster"):
        env = {k: v for k, v in os.environ.items() if k != "HYDRA_FULL_ERROR"}
        done = subprocess.run([sys.executable, "-m", "attnlab", "-m", f"hydra/launcher={launcher}",
                               "variant=reference,unscaled", "seed=1,2", "log.tensorboard=false", "log.terminal=false",
                               f"hydra.sweep.dir={tmp_path / launcher}"], cwd=tmp_path, env=env, capture_output=True,
                              text=True, timeout=900)
        assert done.returncode == 0, done.stderr
        tables[launcher] = pd.read_csv(tmp_path / launcher / "comparison.csv").drop(columns=["path"])
    pd.testing.assert_frame_equal(tables["basic"], tables["ray_cluster"])
