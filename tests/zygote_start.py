"""The test worker's side of tests/zygote.py: starting it, and the command that asks it for a run."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

HERE = Path(__file__).resolve().parent
SOCKET_ENV = "ATTNLAB_TEST_ZYGOTE"  # the client's: where the zygote listens
CLIENT = [sys.executable, "-S", "-E", str(HERE / "zygote_client.py")]  # no site: it starts in milliseconds


def start_zygote(env: dict[str, str] | None = None) -> Iterator[str]:
    """Start a zygote with `env` (this process's by default): the environment its requests are run
    exactly in; yields its socket ("" when ATTNLAB_TEST_ZYGOTE=0 or it did not start); ends it."""
    if os.environ.get(SOCKET_ENV) == "0":
        yield ""
        return
    with tempfile.TemporaryDirectory(prefix="attnlab-zygote-") as folder:
        path = str(Path(folder) / "socket")
        env = {k: v for k, v in (os.environ if env is None else env).items() if k != SOCKET_ENV}
        zygote = subprocess.Popen([sys.executable, str(HERE / "zygote.py"), path], stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env)
        assert zygote.stdout is not None
        ready = zygote.stdout.readline() == b"ready\n"
        try:
            yield path if ready else ""
        finally:
            assert zygote.stdin is not None
            zygote.stdin.close()  # it ends, killing any child left
            try:
                zygote.wait(10)
            except subprocess.TimeoutExpired:
                zygote.kill()
                zygote.wait()


SHIM = """#!/bin/sh
if [ "$1" = "-m" ] && [ "$2" = "attnlab" ]; then shift 2; exec "{python}" -S -E "{client}" "$@"; fi
exec "{python}" "$@"
"""


def python_shim(folder: Path) -> Path:
    """A folder holding a `python` that runs `python -m attnlab ...` through the zygote (the client) and
    anything else as the real one: first on a shell's PATH, a shown command runs as shown."""
    folder.mkdir(parents=True, exist_ok=True)
    shim = folder / "python"
    shim.write_text(SHIM.format(python=sys.executable, client=CLIENT[-1]))
    shim.chmod(0o755)
    return folder
