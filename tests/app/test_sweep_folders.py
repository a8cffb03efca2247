"""Sweep folders and launchers through the real CLI: a dead joblib worker
costs only its job, a re-run resumes, one sweep writes a folder at a time, another sweep's folder is
refused. One plugin per behaviour, written into a temp folder."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import yaml

from tests.training._tiny import TINY_OVERRIDES

pytestmark = pytest.mark.slow

FORWARDS = {
    "os_exits": "os._exit(0)",
    "hangs": "time.sleep(3600)",
    "interrupts": "raise KeyboardInterrupt",
    # kills the joblib worker running its job (the process that started the job's process, from
    # the command's forkserver: attnlab.app.job_worker), once: the marker file says it did
    "kills_worker": """
        marker = Path(__file__).with_suffix(".killed")
        if not marker.exists():
            marker.write_text("")
            os.kill(multiprocessing.parent_process().pid, signal.SIGKILL)
            time.sleep(60)
        return x[..., :2] * 0""",
}


def write_plugins(folder: Path) -> Path:
    folder.mkdir(exist_ok=True)
    for name, body in FORWARDS.items():
        (folder / f"{name}.py").write_text(textwrap.dedent("""
            import multiprocessing, os, signal, time
            from pathlib import Path
            import torch.nn as nn

            class Fault(nn.Module):
                def __init__(self, d_in, d_out):
                    super().__init__()

                def forward(self, x):
        """) + textwrap.indent(textwrap.dedent(body).strip(), " " * 8) + "\n")
    return folder


def command(tmp_path: Path, *args: str) -> tuple[list[str], dict]:
    env = {**{k: v for k, v in os.environ.items() if k != "HYDRA_FULL_ERROR"},
           "ATTNLAB_PLUGIN_PATH": str(write_plugins(tmp_path / "plugins"))}
    argv = [sys.executable, "-m", "attnlab", "-m", *args, f"hydra.sweep.dir={tmp_path / 'sweep'}",
            "weights=native", "log.tensorboard=false", "log.terminal=false", "log.html=false"]
    return argv, env


def attnlab(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    argv, env = command(tmp_path, *args)
    return subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900)


def records(folder: Path) -> dict[str, dict]:
    return {json.loads(p.read_text())["variant"]: {**json.loads(p.read_text()), "mtime": p.stat().st_mtime_ns}
            for p in folder.rglob("record.json")}


def test_faults_and_a_killed_worker_cost_only_their_jobs_and_a_rerun_runs_only_the_rest(tmp_path) -> None:
    sweep = ["hydra/launcher=joblib", "hydra.launcher.n_jobs=2", "timeout_s=5",
             "variant=os_exits,hangs,interrupts,kills_worker,unscaled,reference,linear,scaled_by_dk"]
    first = attnlab(tmp_path, *sweep)
    assert first.returncode == 1, first.stderr
    assert "attnlab: the launcher failed (TerminatedWorkerError" in first.stderr
    found = records(tmp_path / "sweep")
    assert {found[v]["status"] for v in ("unscaled", "reference", "linear", "scaled_by_dk")} == {"ok"}
    assert found["os_exits"]["error"].startswith("variant 'os_exits' raised ExitCalled: os._exit(0) called in forward")
    assert found["hangs"]["error"] == "the job ran past timeout_s=5 and was stopped"
    assert found["interrupts"]["error"].startswith("the job raised KeyboardInterrupt (not a Ctrl-C)")
    # the killed worker's job was launched again (it kills only once) or is listed as missing
    assert found.get("kills_worker", {}).get("status") == "ok" or "no record: job #3 variant=kills_worker" in first.stderr
    ok = sum(r["status"] == "ok" for r in found.values())
    again = attnlab(tmp_path, *sweep)
    assert f"attnlab: resuming the sweep in {tmp_path / 'sweep'}: {ok} of 8 job(s) are done; running the other {8 - ok}" in again.stderr
    after = records(tmp_path / "sweep")
    assert all(after[v]["mtime"] == r["mtime"] for v, r in found.items() if r["status"] == "ok")  # not run again
    assert after["kills_worker"]["status"] == "ok" and again.returncode == 1


def test_a_second_sweep_into_a_running_sweeps_folder_is_one_line_naming_it(tmp_path) -> None:
    argv, env = command(tmp_path, "variant=hangs", "timeout_s=60")
    running = subprocess.Popen(argv, cwd=tmp_path, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                               start_new_session=True)
    try:
        lock = tmp_path / "sweep" / ".attnlab-sweep.lock"
        deadline = time.monotonic() + 300
        while not (lock.exists() and lock.read_text()) and time.monotonic() < deadline:
            time.sleep(0.5)
        second = attnlab(tmp_path, "variant=unscaled")
        assert second.returncode == 2
        assert second.stderr.startswith(f"attnlab: error: hydra.sweep.dir={tmp_path / 'sweep'}: another sweep is writing it "
                                        f"(pid {running.pid} on ")
        assert len(second.stderr.splitlines()) == 1 and not records(tmp_path / "sweep")
    finally:
        os.killpg(running.pid, signal.SIGINT)
        assert running.wait(timeout=120) == 130  # the user's Ctrl-C stops it cleanly


def test_a_new_sweep_into_a_folder_holding_another_sweeps_records_is_refused(tmp_path) -> None:
    assert attnlab(tmp_path, "variant=unscaled").returncode == 0
    other = attnlab(tmp_path, "variant=reference")
    assert other.returncode == 2
    assert other.stderr == (f"attnlab: error: hydra.sweep.dir={tmp_path / 'sweep'}: holds the records of another sweep "
                            "(variant=unscaled weights=native log.tensorboard=false log.terminal=false log.html=false); "
                            "choose a new folder, or run that sweep's command again to resume it\n")
    assert list(records(tmp_path / "sweep")) == ["unscaled"]


def test_every_job_folder_is_inside_the_sweep_folder_whatever_its_values(tmp_path) -> None:
    long_text = " ".join(["word"] * 60)  # 299 characters: more than a folder name may hold
    done = attnlab(tmp_path, "variant=unscaled", "inputs=text", f"inputs.text=../../escaped,/tmp/absolute,'{long_text}'")
    assert done.returncode == 0, done.stderr
    found = sorted(tmp_path.rglob("record.json"))
    sweep = (tmp_path / "sweep").resolve()
    assert len(found) == 3 and all(p.resolve().parent.parent == sweep for p in found), found
    texts = {json.loads(p.read_text())["config"]["inputs"]["text"] for p in found}
    assert texts == {"../../escaped", "/tmp/absolute", long_text}  # the full values kept in the record
    kept = {line for p in found for line in yaml.safe_load(p.parent.joinpath(".hydra", "overrides.yaml").read_text())}
    assert {"inputs.text=../../escaped", "inputs.text=/tmp/absolute", f"inputs.text='{long_text}'"} <= kept


FOUR = ["variant=unscaled,reference,linear,scaled_by_dk"]


@pytest.fixture(scope="module")
def four_done(tmp_path_factory) -> Path:
    """A finished sweep of four jobs."""
    here = tmp_path_factory.mktemp("four")
    done = attnlab(here, *FOUR)
    assert done.returncode == 0, done.stderr
    return here / "sweep"


@pytest.mark.parametrize("damage", ["empty", "half-written"])
def test_a_sweep_whose_multirun_yaml_is_unreadable_is_recognised_from_its_jobs(tmp_path, four_done, damage) -> None:
    shutil.copytree(four_done, tmp_path / "sweep")
    (lost,) = [p.parent for p in (tmp_path / "sweep").rglob("record.json") if json.loads(p.read_text())["variant"] == "linear"]
    shutil.rmtree(lost)  # 3 of 4 done
    multirun = tmp_path / "sweep" / "multirun.yaml"
    whole = multirun.read_bytes()
    multirun.write_bytes(b"" if damage == "empty" else whole[:len(whole) // 2])
    again = attnlab(tmp_path, *FOUR)
    assert again.returncode == 0, again.stderr
    assert again.stderr.splitlines()[:2] == [
        f"attnlab: {multirun} is empty or cut short; its 3 job folder(s) with results are this sweep's "
        "(their .hydra/overrides.yaml): resuming, multirun.yaml written again",
        f"attnlab: resuming the sweep in {tmp_path / 'sweep'}: 3 of 4 job(s) are done; running the other 1"]
    assert sorted((v, r["status"]) for v, r in records(tmp_path / "sweep").items()) == [
        ("linear", "ok"), ("reference", "ok"), ("scaled_by_dk", "ok"), ("unscaled", "ok")]
    assert yaml.safe_load(multirun.read_text())["hydra"]["overrides"]["task"][0] == FOUR[0]


def test_a_resumed_training_sweep_keeps_its_finished_jobs_and_resumes_the_killed_one(tmp_path) -> None:
    sweep = ["training=induction", "variant=unscaled,scaled_by_dk", *TINY_OVERRIDES, "training.checkpoint_every=10"]
    assert attnlab(tmp_path, *sweep).returncode == 0
    results = {p.parent.name: p for p in (tmp_path / "sweep").rglob("training.json")}
    kept, killed = sorted(results)
    before = results[kept].stat().st_mtime_ns
    expected = results[killed].read_bytes()
    results[killed].unlink()  # as a job killed before its result leaves it: no training.json
    again = attnlab(tmp_path, *sweep)
    assert again.returncode == 0, again.stderr
    assert f"resuming the sweep in {tmp_path / 'sweep'}: 1 of 2 job(s) are done; running the other 1" in again.stderr
    assert results[kept].stat().st_mtime_ns == before  # not trained again
    assert results[killed].read_bytes() == expected
