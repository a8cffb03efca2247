"""Issue 43 (1) and (4): a job counts as done only when all of its outputs are, and resume checks
what it trusts. A real SIGKILL after a job's record but before its last output; a record copied
into another job's folder; an MLflow run left RUNNING by a dead process."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from attnlab.record.completion import DONE_FILE

KILLER = '''
import os, signal
from pathlib import Path

class Killer:
    """Kills its own process with SIGKILL once, after the built-in sinks of job 1 wrote."""

    def write(self, records, job):
        flag = Path(os.environ["KILL_FLAG"])
        if job.num == 1 and not flag.exists():
            flag.write_text("killed")
            os.kill(os.getpid(), signal.SIGKILL)
'''
SWEEP = ["variant=unscaled,reference", "seed=1", "log.killer=true", "log.terminal=false"]


def sweep(tmp_path: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "KILL_FLAG": str(tmp_path / "flag"), "ATTNLAB_ISOLATION": "0"}
    env.pop("HYDRA_FULL_ERROR", None)
    return subprocess.run([sys.executable, "-m", "attnlab", "-m", *SWEEP, f"hydra.sweep.dir={tmp_path / 'sweep'}"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)


def job_dirs(folder: Path) -> dict[str, Path]:
    return {json.loads(p.read_text())["variant"]: p.parent for p in folder.glob("*/record.json")}


@pytest.mark.slow
def test_a_job_killed_before_its_last_output_is_completed_on_resume_and_a_copied_record_runs_again(tmp_path) -> None:
    (tmp_path / "plugins").mkdir()
    (tmp_path / "plugins" / "killer.py").write_text(KILLER)
    (tmp_path / "conf" / "sink").mkdir(parents=True)
    (tmp_path / "conf" / "sink" / "killer.yaml").write_text("_target_: killer.Killer\n")
    killed = sweep(tmp_path)
    assert killed.returncode == -9, killed.stderr
    jobs = job_dirs(tmp_path / "sweep")
    assert (jobs["unscaled"] / DONE_FILE).exists() and not (jobs["reference"] / DONE_FILE).exists()
    record_time = (jobs["reference"] / "record.json").stat().st_mtime_ns

    resumed = sweep(tmp_path)
    assert resumed.returncode == 0, resumed.stderr
    assert "job #1 again: 1-seed=1,variant=reference: its outputs were not all written" in resumed.stderr
    assert (jobs["reference"] / "record.json").stat().st_mtime_ns == record_time  # nothing recomputed
    assert all((job / DONE_FILE).exists() and (job / "report.html").exists() for job in jobs.values())
    events = sorted(p.name.rsplit(".", 1)[-1] for p in (tmp_path / "sweep").glob("*/events.out.tfevents.*"))
    assert events == ["job0", "job1", "sessions", "sessions"]  # one event file per job: none twice
    assert not [p for p in (tmp_path / "sweep").rglob("*") if p.name.endswith(".tmp")]

    shutil.copy(jobs["unscaled"] / "record.json", jobs["reference"] / "record.json")  # another job's record
    checked = sweep(tmp_path)
    assert checked.returncode == 0, checked.stderr
    assert "its record files are not the ones it wrote" in checked.stderr
    assert "its record.json is not this job's (another config); running the job again" in checked.stderr
    assert sorted(job_dirs(tmp_path / "sweep")) == ["reference", "unscaled"]
    table = (tmp_path / "sweep" / "comparison.csv").read_text()
    assert table.count("\nreference,") == 1 and table.count("\nunscaled,") == 1


@pytest.mark.slow
def test_a_run_left_running_by_a_dead_process_is_ended_killed(tmp_path, monkeypatch) -> None:
    pytest.importorskip("mlflow")
    from mlflow import MlflowClient

    import attnlab
    from attnlab.sinks.base import JobInfo
    from attnlab.sinks.mlflow import JOB_DIR_TAG, MlflowSink

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    result = attnlab.run("unscaled", out_dir=tmp_path / "job", log={"tensorboard": False, "html": False})
    sink = MlflowSink(tracking_uri=uri, images=False)
    job = JobInfo(tmp_path / "job", tmp_path, 0)
    client = MlflowClient(uri)
    experiment = sink.experiment_id(client, job)
    dead = client.create_run(experiment, tags={JOB_DIR_TAG: str((tmp_path / "job").resolve())}).info.run_id
    sink.write([result.record], job)
    sink.write([result.record], job)  # the same records again: logged once
    runs = {run.info.run_id: run.info.status for run in client.search_runs([experiment])}
    assert runs.pop(dead) == "KILLED"
    assert list(runs.values()) == ["FINISHED"]
