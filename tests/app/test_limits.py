"""Issue 43 (6): the pre-flight reads RLIMIT_AS (a run under `prlimit --as` is refused in one line
naming the limit, not failed in its module), and files past their size limit are refused in one line."""

from __future__ import annotations

import os
import resource
import subprocess
import sys

import pytest

from attnlab.errors import UserError
from attnlab.inputs.kinds import file_inputs


@pytest.mark.skipif(not os.path.exists("/proc/self/status"), reason="the address space in use is read from /proc")
@pytest.mark.slow
def test_a_run_past_the_address_space_limit_is_refused_before_any_forward(tmp_path) -> None:
    limit = 3 * 2**30  # enough for the interpreter with torch, far less than the run asks

    def apply() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (limit, resource.RLIM_INFINITY))

    env = {k: v for k, v in os.environ.items() if k not in ("HYDRA_FULL_ERROR", "ATTNLAB_MEMORY_LIMIT")}
    run = subprocess.run([sys.executable, "-m", "attnlab", "variant=unscaled", "inputs=random", "inputs.n_tokens=20000",
                          "batch=2", f"hydra.run.dir={tmp_path / 'run'}"], cwd=tmp_path, env=env, capture_output=True,
                         text=True, timeout=300, preexec_fn=apply)
    assert run.returncode == 2, run.stderr
    assert run.stderr.splitlines() == [line for line in run.stderr.splitlines() if line.startswith("attnlab: error: this run needs")]
    assert "RLIMIT_AS" in run.stderr and not (tmp_path / "run" / "record.json").exists()


def test_an_inputs_file_past_the_limit_is_refused_before_it_is_read(tmp_path, monkeypatch) -> None:
    path = tmp_path / "big.csv"
    path.write_text("1,2,3\n" * 400_000)  # 2.4 MB
    monkeypatch.setenv("ATTNLAB_MAX_FILE_MB", "1")
    with pytest.raises(UserError, match=r"big.csv: 2 MB, past the 1 MB limit of inputs files"):
        file_inputs(1, "file", str(path))
