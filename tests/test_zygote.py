"""The `app` fixture's zygote (tests/zygote.py) runs the command as a fresh interpreter does: the same
output, exit code and record; a request it cannot run exactly goes to a fresh interpreter."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from contextlib import contextmanager

import pytest

from tests.zygote_start import CLIENT, SOCKET_ENV, start_zygote

pytestmark = pytest.mark.slow  # subprocesses

RUN = ["variant=unscaled", "log.tensorboard=false", "log.html=false"]


def both(zygote: str, tmp_path, *args: str, env: dict | None = None) -> list[tuple]:
    """(exit code, stdout, stderr, record) of `args` run fresh, then through the zygote."""
    got = []
    for how, command in (("fresh", [sys.executable, "-m", "attnlab"]), ("zygote", CLIENT)):
        out = tmp_path / how
        done = subprocess.run([*command, *args, f"hydra.run.dir={out}"], cwd=tmp_path, capture_output=True, text=True,
                              env={**os.environ, **(env or {}), SOCKET_ENV: zygote}, timeout=300)
        record = json.loads((out / "record.json").read_text()) if (out / "record.json").is_file() else {}
        record.pop("created", None)
        got.append((done.returncode, done.stdout.replace(how, "HOW"), done.stderr.replace(how, "HOW"),
                    json.dumps(record, sort_keys=True).replace(how, "HOW")))
    return got


def test_a_run_and_a_refused_one_are_the_same_through_the_zygote(zygote, tmp_path) -> None:
    assert zygote  # started: else this compares two fresh runs
    fresh, forked = both(zygote, tmp_path, *RUN)
    assert fresh == forked and fresh[0] == 0 and "findings:" in fresh[1] and fresh[3] != "{}"
    fresh, forked = both(zygote, tmp_path, "variant=nope")
    assert fresh == forked and fresh[0] == 2 and fresh[2].startswith("attnlab: error: ")


def _ask(zygote: str, env: dict) -> bytes:
    """The zygote's first answer to `attnlab --version` with `env`."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as connection, open(os.devnull, "r+b") as quiet:
        connection.connect(zygote)
        request = json.dumps({"argv": ["--version"], "cwd": os.getcwd(), "env": env}).encode() + b"\n"
        socket.send_fds(connection, [request], [quiet.fileno()] * 3)
        return connection.makefile("rb").readline()


def test_an_environment_key_its_imports_read_goes_to_a_fresh_interpreter() -> None:
    """attnlab.app.progress reads ATTNLAB_PROGRESS_DELAY at import, torch reads OMP_NUM_THREADS there:
    a child forked after those imports would not see a new value. A zygote of its own, started with
    this environment fixed: the worker's may have been started before other tests' imports set keys."""
    base = {k: v for k, v in os.environ.items() if k != SOCKET_ENV}
    with contextmanager(start_zygote)(base) as zygote:
        assert zygote, "the zygote did not start"
        assert _ask(zygote, {**base, "ATTNLAB_PROGRESS_DELAY": "7"}) == b"fallback ATTNLAB_PROGRESS_DELAY\n"
        assert _ask(zygote, {**base, "OMP_NUM_THREADS": "3"}) == b"fallback OMP_NUM_THREADS\n"
        assert _ask(zygote, {**base, "ATTNLAB_NOT_READ_AT_IMPORT": "1"}).startswith(b"pid ")


SLEEPS = """
import os, time
import torch
import torch.nn as nn

class Sleeps(nn.Module):
    def __init__(self, d_in, d_out):
        super().__init__()
        self.W_query = nn.Parameter(torch.rand(d_in, d_out))

    def forward(self, x):
        with open(os.environ["S60T_PID"], "w") as pid:
            pid.write(str(os.getpid()))
        time.sleep(600)
        return x @ self.W_query
"""


def test_a_killed_client_takes_its_command_with_it(zygote, tmp_path) -> None:
    """subprocess.run's timeout kills the client: the command it asked for ends too."""
    sleeper = tmp_path / "user_plugins" / "sleeps.py"
    sleeper.parent.mkdir()
    sleeper.write_text(SLEEPS)
    pid_file = tmp_path / "pid"
    client = subprocess.Popen([*CLIENT, "variant=sleeps", "log.tensorboard=false", f"hydra.run.dir={tmp_path / 'out'}"],
                              cwd=tmp_path,
                              env={**os.environ, SOCKET_ENV: zygote, "S60T_PID": str(pid_file),
                                   "ATTNLAB_PLUGIN_PATH": str(sleeper.parent)},
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    while not pid_file.is_file() or not pid_file.read_text():
        assert time.monotonic() < deadline and client.poll() is None
        time.sleep(0.1)
    client.kill()
    client.wait()
    command = int(pid_file.read_text())  # the command's own process: its forward wrote it
    deadline = time.monotonic() + 30
    while _alive(command):
        assert time.monotonic() < deadline, "the command outlived its client"
        time.sleep(0.1)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as stat:  # a zombie is ended
        return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
