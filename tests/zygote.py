"""A preloaded `python -m attnlab` for the tests (the `app` fixture): one process per test worker
imports torch, Hydra and attnlab's app (running nothing: no torch op, no discovery), then forks a
child for each request, which runs `python -m attnlab ARGS` as a fresh interpreter would, with the
request's arguments, working folder, environment and standard streams (passed as descriptors by
tests/zygote_client.py). Each test still runs the real command in a process of its own; only the
imports are shared. A request the fork cannot run exactly (an environment key the imports read,
or one a C library reads at import) is answered "fallback": the client runs a fresh interpreter.

Run as `python tests/zygote.py SOCKET`; it serves until its stdin closes (the test worker ended).
"""

from __future__ import annotations

import array
import json
import os
import selectors
import signal
import socket
import sys

# keys a request may change from the zygote's own environment: read at run time only (the ones the
# imports read are taken out below, as they are read)
ALLOWED_PREFIXES = ("ATTNLAB_", "PYTEST_")
ALLOWED = {"COLUMNS", "LINES", "EDITOR", "HYDRA_FULL_ERROR", "PWD", "OLDPWD", "SHLVL", "_", "ATTNLAB_TEST_ZYGOTE"}


class _Watched(os._Environ):
    """os.environ, noting each key whose value (`read`) or presence (`asked`) the zygote's imports read."""

    read: set[str] = set()
    asked: set[str] = set()

    def __getitem__(self, key: str) -> str:
        _Watched.read.add(key)
        return super().__getitem__(key)

    def __contains__(self, key: object) -> bool:
        _Watched.asked.add(str(key))
        return super().__contains__(key)

    def items(self):  # type: ignore[override] - a walk over every key (tqdm looks for its TQDM_* so) reads none by name
        return {self.decodekey(k): self.decodevalue(v) for k, v in self._data.items()}.items()


def preload() -> tuple[set[str], set[str]]:
    """Import what `python -m attnlab` imports, noting the environment keys read meanwhile."""
    environ = os.environ
    watched = _Watched(environ._data, environ.encodekey, environ.decodekey, environ.encodevalue, environ.decodevalue)
    os.environ = watched  # noqa: B003 - the same environment, watched
    try:
        import hydra  # noqa: F401
        import omegaconf  # noqa: F401
        import pandas  # noqa: F401
        import torch  # noqa: F401

        import attnlab.app.cli  # noqa: F401 - what attnlab.__main__ imports, and the app
        import attnlab.app.help_cache  # noqa: F401
        import attnlab.app.job_worker  # noqa: F401
        import attnlab.app.lifeline  # noqa: F401
        import attnlab.app.run_job  # noqa: F401
        import attnlab.app.streams  # noqa: F401
    finally:
        os.environ = environ  # noqa: B003
    import threading

    assert threading.active_count() == 1, "an import started a thread: a fork would lose it"
    return set(_Watched.read), set(_Watched.asked)


def inexact(env: dict[str, str], read: set[str], asked: set[str]) -> list[str]:
    """The keys of `env` that keep a child with it in place of the zygote's own from running as a
    fresh interpreter would (none: it can): a key the imports read, or asked for and that came or went,
    or one not known to be read at run time only."""
    changed = {k for k in env.keys() | os.environ.keys() if env.get(k) != os.environ.get(k)}
    return sorted(k for k in changed if not (k in ALLOWED or k.startswith(ALLOWED_PREFIXES)) or k in read
                  or (k in asked and (k in env) != (k in os.environ)))


def serve(path: str, read: set[str], asked: set[str]) -> tuple[socket.socket, dict]:
    """Answers requests until stdin closes; returns only in a forked child: its connection and request."""
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(16)
    print("ready", flush=True)  # the fixture waits for this line before its first request
    selector = selectors.DefaultSelector()
    selector.register(listener, selectors.EVENT_READ, "accept")
    selector.register(sys.stdin, selectors.EVENT_READ, "stdin")
    children: dict[int, socket.socket] = {}
    while True:
        for key, _ in selector.select(timeout=0.02):
            if key.data == "stdin":
                if not os.read(sys.stdin.fileno(), 1):
                    for pid in children:
                        os.kill(pid, signal.SIGKILL)
                    os._exit(0)
            elif key.data == "accept":
                connection, _ = listener.accept()
                request, fds = _receive(connection)
                keys = inexact(request["env"], read, asked)
                if keys:
                    connection.sendall(f"fallback {' '.join(keys)}\n".encode())
                    connection.close()
                    for fd in fds:
                        os.close(fd)
                    continue
                pid = os.fork()
                if pid == 0:
                    selector.close()
                    listener.close()
                    for other in children.values():
                        other.close()
                    _become_the_command(request, fds)
                    return connection, request
                for fd in fds:
                    os.close(fd)
                connection.sendall(f"pid {pid}\n".encode())
                children[pid] = connection
                selector.register(connection, selectors.EVENT_READ, pid)
            elif not key.fileobj.recv(1):  # type: ignore[union-attr] - the client went (killed): so does its child
                os.kill(key.data, signal.SIGKILL)
                selector.unregister(key.fileobj)
        for pid in list(children):
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                connection = children.pop(pid)
                try:
                    selector.unregister(connection)
                except (KeyError, ValueError):
                    pass
                try:
                    connection.sendall(f"exit {os.waitstatus_to_exitcode(status)}\n".encode())
                except OSError:
                    pass
                connection.close()


def _receive(connection: socket.socket) -> tuple[dict, list[int]]:
    data, fds = b"", array.array("i")
    while not data.endswith(b"\n"):
        chunk, ancillary, _, _ = connection.recvmsg(1 << 20, socket.CMSG_SPACE(3 * fds.itemsize))
        for level, kind, payload in ancillary:
            if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                fds.frombytes(payload[: len(payload) - len(payload) % fds.itemsize])
        if not chunk:
            break
        data += chunk
    return json.loads(data), list(fds)


def _become_the_command(request: dict, fds: list[int]) -> None:
    """In the child: the request's streams, folder, environment and arguments, as `python -m` sets them."""
    import random

    import numpy

    for target, fd in enumerate(fds):
        os.dup2(fd, target)
        os.close(fd)
    sys.stdout.reconfigure(line_buffering=os.isatty(1))  # as a fresh interpreter makes it for that stream
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    sys.argv = ["-m", *request["argv"]]
    sys.orig_argv = [sys.executable, "-m", "attnlab", *request["argv"]]
    sys.path[0] = os.getcwd()  # `python -m`: the working folder first
    random.seed()  # a fresh process's own seeds, not the zygote's
    numpy.random.seed()


def main() -> None:
    connection, _ = serve(sys.argv[1], *preload())
    connection.close()
    import runpy
    import types

    sys.modules["__main__"] = types.ModuleType("__main__")
    runpy._run_module_as_main("attnlab")  # type: ignore[attr-defined] - what `python -m attnlab` runs


if __name__ == "__main__":
    main()
