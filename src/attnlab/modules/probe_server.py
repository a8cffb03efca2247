"""The plugin import probe's server: one process per attnlab process that imports torch once, then
forks a child for each probe (attnlab.modules.import_probe). A fresh interpreter for each probe paid
torch's import every time; a child forked from here starts with it in memory and with nothing else
run (no torch op has run in the server, so its fork is safe), then imports the plugin files as a
fresh child would. The server ends when the process that started it closes its pipe (or dies).
"""

from __future__ import annotations

import atexit
import json
import os
import select
import signal
import subprocess
import sys
import time
from contextlib import suppress
from typing import Any

SERVER = "from attnlab.modules.probe_server import serve; serve()"


def serve() -> None:
    """The server's loop: a request is one JSON line on stdin ({done, files, cwd, env}); it answers
    the child's pid, then its exit code (negative: the signal that ended it), one line each."""
    import attnlab.modules.plugin_import  # noqa: F401 - torch and the probe's code, once for every child

    requests, answers = sys.stdin.buffer, sys.stdout.buffer
    for line in requests:
        request = json.loads(line)
        pid = os.fork()
        if pid == 0:  # the probe: returns to the interpreter, which ends as a fresh `python -c` child would
            _probe_child(request)
            return
        answers.write(f"{pid}\n".encode())
        answers.flush()
        answers.write(f"{os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])}\n".encode())
        answers.flush()


def _probe_child(request: dict[str, Any]) -> None:
    from attnlab.modules.plugin_import import probe_imports

    quiet = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):  # as the fresh child had: nothing read, nothing shown
        os.dup2(quiet, fd)
    os.close(quiet)
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    probe_imports(request["done"], request["files"])


class ProbeServer:
    """The server's process, seen from the process it serves."""

    def __init__(self) -> None:
        self.process = subprocess.Popen([sys.executable, "-c", SERVER], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                        stderr=subprocess.DEVNULL, env={**os.environ, "OMP_NUM_THREADS": "1"})
        self.pending = b""

    def probe(self, done: str, files: list[str], timeout_s: float) -> int | None:
        """The exit code of a child that imported `files` in order (noting each in `done`); None when
        it did not end within `timeout_s` (it is killed)."""
        request = {"done": done, "files": files, "cwd": os.getcwd(), "env": dict(os.environ)}
        assert self.process.stdin is not None  # a pipe: Popen(stdin=PIPE)
        self.process.stdin.write(json.dumps(request).encode() + b"\n")
        self.process.stdin.flush()
        pid = int(self._line(None))
        try:
            return int(self._line(time.monotonic() + timeout_s))
        except TimeoutError:
            os.kill(pid, signal.SIGKILL)
            self._line(None)  # its code, once the server has reaped it
            return None
        except BaseException:  # a Ctrl-C meanwhile: the child goes, and the server with it (its answers are behind)
            os.kill(pid, signal.SIGKILL)
            raise

    def _line(self, deadline: float | None) -> bytes:
        assert self.process.stdout is not None  # a pipe: Popen(stdout=PIPE)
        fd = self.process.stdout.fileno()
        while b"\n" not in self.pending:
            wait = None if deadline is None else max(0.0, deadline - time.monotonic())
            if not select.select([fd], [], [], wait)[0]:
                raise TimeoutError
            chunk = os.read(fd, 4096)
            if not chunk:
                raise EOFError("the plugin probe server ended")
            self.pending += chunk
        line, self.pending = self.pending.split(b"\n", 1)
        return line

    def stop(self) -> None:
        with suppress(OSError):  # a request it never read, when it was killed
            if self.process.stdin is not None:
                self.process.stdin.close()  # its loop ends
        try:
            self.process.wait(5)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


_servers: dict[int, ProbeServer] = {}  # this process's server, by pid (a forked child starts its own)


def probe(done: str, files: list[str], timeout_s: float) -> int | None:
    """The exit code of a child, forked from this process's server, that imported `files` in order;
    None when it did not finish in `timeout_s`. A server that ended is started again."""
    for attempt in range(2):
        server = _servers.get(os.getpid())
        if server is None:
            server = _servers[os.getpid()] = ProbeServer()
        try:
            return server.probe(done, files, timeout_s)
        except BaseException as exc:
            _stop_own()
            if attempt or not isinstance(exc, (EOFError, OSError, ValueError)):
                raise
            # it had ended (killed from outside): once more, with a new one
    raise AssertionError("unreachable")


@atexit.register
def _stop_own() -> None:
    server = _servers.pop(os.getpid(), None)
    if server is not None:
        server.stop()
