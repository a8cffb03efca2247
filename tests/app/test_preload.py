"""The job forkserver's preload (attnlab.app.preload) holds everything a job imports: a module a job
imports lazily is imported again, and compiled, in every job's process of a sweep."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

pytestmark = pytest.mark.slow

# A fresh interpreter that imports what the forkserver imports, then runs one sweep's job the way a
# job's process does (job_work, the sweep folder's multirun.yaml read by the TensorBoard sink).
JOB_AFTER_PRELOAD = textwrap.dedent("""
    import json, sys
    from pathlib import Path

    import torch
    import attnlab.app.preload
    from attnlab.app.api import compose_config
    from attnlab.app.run_job import job_work
    from attnlab.sinks.base import JobInfo

    sweep = Path(sys.argv[1])
    sweep.mkdir()
    (sweep / "multirun.yaml").write_text(
        "hydra:\\n  sweeper:\\n    params: null\\n  overrides:\\n    task:\\n    - variant=reference,unscaled\\n")
    cfg = compose_config("unscaled", 1, ["log.progress=false"])
    before = set(sys.modules)
    failed = job_work(cfg, JobInfo(dir=sweep / "0", sweep_dir=sweep, num=0), multirun=True, checked=False)
    print(json.dumps({"failed": failed, "imported": sorted(set(sys.modules) - before)}))
""")


def test_a_sweeps_job_imports_nothing_the_forkserver_has_not(tmp_path) -> None:
    done = subprocess.run([sys.executable, "-c", JOB_AFTER_PRELOAD, str(tmp_path / "sweep")], cwd=tmp_path,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["failed"] == []
    assert (tmp_path / "sweep" / "0" / "record.json").exists()  # the job ran, its sinks included
    assert result["imported"] == []
