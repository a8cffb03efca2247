"""The job worker (attnlab.app.job_worker): one process runs a sweep's jobs one after another, a job
that did not end ok ends it, and it never outlives the process that sends it jobs."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from functools import partial
from pathlib import Path

import pytest

from attnlab.app.isolation import isolated
from attnlab.app.job_worker import isolates_here, shares_with_launcher
from attnlab.compute.pipeline import exits_raise

pytestmark = pytest.mark.slow  # starts the forkserver: torch and the plugins imported once


def note_pid(into: Path, failed: list[str], then: str = "") -> list[str]:
    """A job: appends its process's pid to `into`, then returns `failed` (its failed records'
    paths) or does `then`."""
    with into.open("a") as file:
        file.write(f"{os.getpid()}\n")
    if then == "os._exit":
        os._exit(3)
    if then == "sleep":
        with exits_raise():  # as in a forward: os._exit replaced for the duration
            time.sleep(3600)
    return failed


def pids(path: Path) -> list[int]:
    return [int(line) for line in path.read_text().split()]


def test_ok_jobs_share_a_worker_and_a_job_that_did_not_end_ok_ends_it(tmp_path) -> None:
    noted = tmp_path / "pids"
    assert isolated(partial(note_pid, noted, []), str, None) == []
    assert isolated(partial(note_pid, noted, []), str, None) == []
    assert isolated(partial(note_pid, noted, ["its failed record"]), str, None) == ["its failed record"]
    assert isolated(partial(note_pid, noted, []), str, None) == []
    cause = isolated(partial(note_pid, noted, [], "os._exit"), str, None)
    assert cause == ["the job's process exited with code 3 before reporting (os._exit in a module?)"]
    assert isolated(partial(note_pid, noted, []), str, None) == []
    first, second, failed, after_failed, exits, after_exit = pids(noted)
    assert first == second == failed != after_failed == exits != after_exit
    assert os.getpid() not in pids(noted)


def test_a_worker_past_its_timeout_is_stopped_and_the_next_job_gets_a_fresh_one(tmp_path) -> None:
    noted = tmp_path / "pids"
    assert isolated(partial(note_pid, noted, [], "sleep"), str, 1.0) == ["the job ran past timeout_s=1 and was stopped"]
    assert isolated(partial(note_pid, noted, []), str, None) == []
    hung, after = pids(noted)
    assert hung != after and not alive(hung)


def alive(pid: int) -> bool:
    """Running (a zombie waiting for the forkserver to reap it is not)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return False
    return state != "Z"


@pytest.mark.skipif(not Path("/proc").is_dir(), reason="reads /proc")
def test_a_worker_ends_mid_job_when_the_process_sending_jobs_is_killed(tmp_path) -> None:
    """A killed joblib worker's job is launched again: its own worker must not go on writing."""
    noted = tmp_path / "pids"
    sender = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
        from functools import partial
        from pathlib import Path
        from attnlab.app.isolation import isolated
        from tests.app.test_job_worker import note_pid
        isolated(partial(note_pid, Path({str(noted)!r}), [], "sleep"), str, None)
    """)], cwd=Path(__file__).resolve().parents[2])
    deadline = time.monotonic() + 120
    while not (noted.exists() and noted.read_text().strip()) and time.monotonic() < deadline:
        time.sleep(0.1)
    (worker,) = pids(noted)
    assert alive(worker)
    sender.send_signal(signal.SIGKILL)
    sender.wait()
    deadline = time.monotonic() + 10
    while alive(worker) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not alive(worker)


@pytest.mark.parametrize(("args", "expected"), [
    (["-m", "variant=a,b"], True),
    (["--multirun", "seed=1,2", "hydra/launcher=basic"], True),
    (["variant=unscaled", "timeout_s=5"], True),
    (["variant=unscaled"], False),
    (["variant=unscaled", "timeout_s=null"], False),
    (["-m", "variant=a,b", "hydra/launcher=joblib"], False),  # jobs run in joblib's workers
    (["-m", "variant=a,b", "--cfg", "job"], False),
    (["-m", "variant=a,b", "--help"], False),
])
def test_the_forkserver_starts_early_only_for_a_command_that_isolates_jobs_here(args, expected, monkeypatch) -> None:
    monkeypatch.delenv("ATTNLAB_ISOLATION", raising=False)
    assert isolates_here(args) is expected
    monkeypatch.setenv("ATTNLAB_ISOLATION", "0")
    assert isolates_here(args) is False


@pytest.mark.parametrize(("args", "expected"), [
    (["-m", "variant=a,b", "hydra/launcher=joblib"], True),
    (["--multirun", "seed=1,2", "hydra/launcher=submitit_local"], False),  # its job process must be the worker's parent
    (["-m", "variant=a,b"], False),  # the basic launcher: jobs isolated in the command's own process
    (["-m", "variant=a,b", "hydra/launcher=submitit_slurm"], False),  # another machine's processes
    (["variant=unscaled", "hydra/launcher=joblib"], False),
    (["-m", "variant=a,b", "hydra/launcher=joblib", "--cfg", "job"], False),
])
def test_the_command_shares_its_forkserver_only_with_a_local_launchers_processes(args, expected, monkeypatch) -> None:
    monkeypatch.delenv("ATTNLAB_ISOLATION", raising=False)
    assert shares_with_launcher(args) is expected
    monkeypatch.setenv("ATTNLAB_ISOLATION", "0")
    assert shares_with_launcher(args) is False


@pytest.mark.skipif(not Path("/proc").is_dir(), reason="reads /proc")
def test_a_refused_sweep_leaves_no_forkserver_behind(tmp_path) -> None:
    mark = f"attnlab-test-{os.getpid()}-{time.monotonic_ns()}"
    env = {**os.environ, "ATTNLAB_TEST_MARK": mark}
    env.pop("ATTNLAB_ISOLATION", None)
    errors = tmp_path / "stderr"
    with errors.open("w") as stderr:  # a file, not a pipe: run() returns when the command exits, not when the server does
        done = subprocess.run([sys.executable, "-m", "attnlab", "-m", "variant=nope", "seed=1,2",
                               f"hydra.sweep.dir={tmp_path / 'sweep'}"], cwd=tmp_path, env=env,
                              stdout=subprocess.DEVNULL, stderr=stderr, timeout=300)
    assert done.returncode == 2 and errors.read_text().startswith("attnlab: error: unknown variant"), errors.read_text()
    assert not (tmp_path / "sweep").exists()
    time.sleep(0.2)  # a SIGKILL is delivered asynchronously
    assert [pid for pid in marked(mark) if alive(pid)] == []


NOTES_PROCESSES = """
import multiprocessing, os
from pathlib import Path
import torch.nn as nn

class Noted(nn.Module):
    def __init__(self, d_in, d_out):
        super().__init__()

    def forward(self, x):
        server = os.getppid()
        above = Path(f"/proc/{server}/stat").read_text().rsplit(")", 1)[1].split()[1]
        with open(os.environ["NOTED"], "a") as noted:
            noted.write(f"{os.getpid()} {server} {above} {multiprocessing.parent_process().pid}\\n")
        return x[..., :2] * 0
"""


@pytest.mark.skipif(not Path("/proc").is_dir(), reason="reads /proc")
def test_a_joblib_sweeps_workers_fork_their_jobs_processes_from_the_commands_forkserver(tmp_path) -> None:
    """The command starts the one forkserver beside its own start; each joblib worker starts no server
    of its own (no second import of torch and the preload) and sends its jobs to a process forked from it."""
    (tmp_path / "plugins").mkdir()
    (tmp_path / "plugins" / "noted.py").write_text(NOTES_PROCESSES)
    noted = tmp_path / "noted"
    env = {k: v for k, v in os.environ.items() if k not in ("HYDRA_FULL_ERROR", "ATTNLAB_ISOLATION")}
    command = subprocess.Popen([sys.executable, "-m", "attnlab", "-m", "variant=noted", "seed=1,2,3",
                                "hydra/launcher=joblib", "hydra.launcher.n_jobs=2", "weights=native", "log.terminal=false",
                                "log.tensorboard=false", "log.html=false", f"hydra.sweep.dir={tmp_path / 'sweep'}"],
                               cwd=tmp_path, env={**env, "NOTED": str(noted)}, stdout=subprocess.DEVNULL,
                               stderr=subprocess.PIPE, text=True)
    _, errors = command.communicate(timeout=600)
    assert command.returncode == 0, errors
    lines = {tuple(int(n) for n in line.split()) for line in noted.read_text().splitlines()}
    jobs, servers, above, senders = (set(column) for column in zip(*lines))
    assert len(servers) == 1 and above == {command.pid}  # one server, the command's child
    assert senders and command.pid not in senders and not senders & servers  # sent by joblib's workers
    assert len(jobs) == len(senders)  # each joblib worker's jobs ran in its one kept job worker


def marked(mark: str) -> list[int]:
    found = []
    for proc in Path("/proc").iterdir():
        try:
            if proc.name.isdigit() and f"ATTNLAB_TEST_MARK={mark}".encode() in (proc / "environ").read_bytes():
                found.append(int(proc.name))
        except OSError:
            continue
    return found


def change_default_dtype(into: Path) -> list[str]:
    import torch

    note_pid(into, [])
    torch.set_default_dtype(torch.float64)
    return []


def default_dtype(into: Path) -> list[str]:
    import torch

    note_pid(into, [])
    return [] if torch.get_default_dtype() == torch.float32 else [f"default dtype {torch.get_default_dtype()}"]


def test_a_job_that_changes_torchs_defaults_ends_its_worker(tmp_path) -> None:
    """A module that sets torch's default dtype would change every later job of the worker."""
    noted = tmp_path / "pids"
    assert isolated(partial(change_default_dtype, noted), str, None) == []
    assert isolated(partial(default_dtype, noted), str, None) == []
    changed, after = pids(noted)
    assert changed != after


def train_a_step(into: Path) -> list[str]:
    """A job that builds torch's AdamW, as every training job does: its first import of torch._dynamo
    replaces torch.manual_seed with torch's own wrapper of it. Fails its record if that did not happen
    here (the test would then not be testing it)."""
    import torch

    note_pid(into, [])
    seed = torch.manual_seed
    model = torch.nn.Linear(3, 3)
    optimizer = torch.optim.AdamW(model.parameters())
    model(torch.ones(2, 3)).sum().backward()
    optimizer.step()
    return [] if torch.manual_seed is not seed else ["torch.manual_seed was not wrapped by this job"]


def test_a_training_job_keeps_its_worker_for_the_next_job(tmp_path) -> None:
    """torch's own wrapper of its own function is no plugin's change: the worker is not retired."""
    noted = tmp_path / "pids"
    assert isolated(partial(train_a_step, noted), str, None) == []
    assert isolated(partial(note_pid, noted, []), str, None) == []
    trained, after = pids(noted)
    assert trained == after
