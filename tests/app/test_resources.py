"""Memory and disk through the real CLI: inputs counted before they are
built, ATTNLAB_MEMORY_LIMIT capping the process, and writes that fail naming the folder and cause
while the sweep goes on. One plugin per behaviour, written into a temp folder."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow


def attnlab(cwd: Path, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    full = {**{k: v for k, v in os.environ.items() if k != "HYDRA_FULL_ERROR"}, **(env or {})}
    return subprocess.run([sys.executable, "-m", "attnlab", *args, "log.tensorboard=false"], cwd=cwd, env=full,
                          capture_output=True, text=True, timeout=600)


def plugin(folder: Path, name: str, forward: str) -> Path:
    folder.mkdir(exist_ok=True)
    (folder / f"{name}.py").write_text(textwrap.dedent("""
        from pathlib import Path
        import torch
        import torch.nn as nn

        class Plugin(nn.Module):
            def __init__(self, d_in, d_out):
                super().__init__()

            def forward(self, x):
    """) + textwrap.indent(textwrap.dedent(forward).strip(), " " * 8) + "\n")
    return folder


def test_inputs_too_large_are_one_line_before_they_are_built(tmp_path) -> None:
    done = attnlab(tmp_path, "inputs=random", "inputs.n_tokens=1000000000", f"hydra.run.dir={tmp_path / 'run'}")
    assert done.returncode == 2
    assert done.stderr.startswith("attnlab: error: this run needs about ") and len(done.stderr.splitlines()) == 1
    assert "alloc_cpu" not in done.stderr and not (tmp_path / "run").exists()


def test_the_memory_limit_caps_the_process_so_an_allocation_past_it_fails_its_record(tmp_path) -> None:
    # 4 GiB reserved, never touched: without the cap the allocation succeeds and the record is ok
    folder = plugin(tmp_path / "plugins", "greedy", """
        big = torch.empty(2**30)  # (2**30,) float32
        return x[..., :2] * 0 + big[:1] * 0""")
    done = attnlab(tmp_path, "variant=greedy", "weights=native", f"hydra.run.dir={tmp_path / 'run'}",
                   env={"ATTNLAB_PLUGIN_PATH": str(folder), "ATTNLAB_MEMORY_LIMIT": "2e9"})
    assert done.returncode == 1, done.stderr
    record = json.loads((tmp_path / "run" / "record.json").read_text())
    assert record["status"] == "failed" and "can't allocate memory" in record["error"]


def test_a_table_that_cannot_be_written_is_named_and_the_sweep_goes_on(tmp_path) -> None:
    sweep = tmp_path / "sweep"
    # the job turns the sweep's comparison.csv into a folder: every later write of the table fails
    folder = plugin(tmp_path / "plugins", "blocks_table", f"""
        Path({str(sweep / 'comparison.csv')!r}).mkdir(parents=True, exist_ok=True)
        return x[..., :2] * 0""")
    done = attnlab(tmp_path, "-m", "variant=blocks_table,unscaled", "seed=1,2", "weights=native", f"hydra.sweep.dir={sweep}",
                   "log.terminal=false", env={"ATTNLAB_PLUGIN_PATH": str(folder)})
    assert done.returncode == 1
    assert f"attnlab: warning: {sweep}: cannot write comparison.csv: Is a directory; the tables in {sweep} are stale" in done.stderr
    assert done.stderr.rstrip().endswith(f"attnlab: error: {sweep}: cannot write comparison.csv: Is a directory")
    statuses = [json.loads(p.read_text())["status"] for p in sweep.rglob("record.json")]
    assert statuses == ["ok"] * 4 and "Traceback" not in done.stderr


def test_a_sink_that_fails_after_the_record_marks_the_record_failed(tmp_path) -> None:
    """A sink's file left half-written (a full disk) is never behind an ok record."""
    (tmp_path / "plugins").mkdir()
    (tmp_path / "plugins" / "disk_full.py").write_text(textwrap.dedent("""
        import errno, os

        class DiskFull:
            def write(self, records, job):
                (job.dir / "events.half").write_text("the first half")
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    """))
    (tmp_path / "conf" / "sink").mkdir(parents=True)
    (tmp_path / "conf" / "sink" / "disk_full.yaml").write_text("_target_: disk_full.DiskFull\n")
    done = attnlab(tmp_path, "variant=unscaled", "log.disk_full=true", f"hydra.run.dir={tmp_path / 'run'}")
    assert done.returncode == 1
    assert done.stderr.splitlines()[-1] == "attnlab: error: sink disk_full: OSError: [Errno 28] No space left on device"
    record = json.loads((tmp_path / "run" / "record.json").read_text())
    assert record["status"] == "failed" and record["error"] == "sink disk_full: OSError: [Errno 28] No space left on device"
    assert record["diagnostics"]  # what the run found is kept
