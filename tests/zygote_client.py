"""`python tests/zygote_client.py ARGS`: runs `python -m attnlab ARGS` in a child of the test worker's
zygote (tests/zygote.py), with this process's working folder, environment and standard streams, and
ends as that child ended (its exit code, or killed by its signal). Signals sent here are passed to
the child; killed here, the zygote kills the child. Standard library only: it starts in milliseconds.
With no zygote, a closed standard stream, or a request the zygote cannot run exactly, it becomes
`python -m attnlab ARGS` itself (exec)."""

import json
import os
import signal
import socket
import sys

SOCKET_ENV = "ATTNLAB_TEST_ZYGOTE"


def fresh(argv: list[str]) -> None:
    os.execv(sys.executable, [sys.executable, "-m", "attnlab", *argv])


def main() -> None:
    argv = sys.argv[1:]
    path = os.environ.pop(SOCKET_ENV, "")
    try:
        for fd in (0, 1, 2):
            os.fstat(fd)
    except OSError:
        path = ""
    if not path:
        fresh(argv)
    connection = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        connection.connect(path)
    except OSError:
        fresh(argv)
    request = json.dumps({"argv": argv, "cwd": os.getcwd(), "env": dict(os.environ)}).encode() + b"\n"
    socket.send_fds(connection, [request], [0, 1, 2])
    answers = connection.makefile("rb")
    first = answers.readline().decode().split()
    if len(first) != 2 or first[0] != "pid":
        fresh(argv)  # "fallback"
    pid = int(first[1])
    for number in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1, signal.SIGUSR2):
        signal.signal(number, lambda received, frame: os.kill(pid, received))
    last = answers.readline().decode().split()
    code = int(last[1]) if len(last) == 2 else 1
    if code < 0:
        signal.signal(-code, signal.SIG_DFL)
        os.kill(os.getpid(), -code)
    os._exit(code)


if __name__ == "__main__":
    main()
