"""The progress bar: drawn on a terminal, silent on a pipe."""

from __future__ import annotations

import io
import os
import pty
import subprocess
import sys
import threading

import pytest

from attnlab.app.progress import Progress


class FakeTerminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_not_a_terminal_stays_quiet():
    stream = io.StringIO()
    with Progress(5, stream=stream, delay=0) as bar:
        for _ in range(5):
            bar.phase("forward")
            bar.advance()
    assert stream.getvalue() == ""


def test_disabled_stays_quiet_on_a_terminal():
    stream = FakeTerminal()
    with Progress(5, stream=stream, delay=0, enabled=False) as bar:
        bar.advance(5)
    assert stream.getvalue() == ""


def test_terminal_gets_a_bar_and_a_final_line():
    stream = FakeTerminal()
    with Progress(4, stream=stream, delay=0, label="seeds") as bar:
        bar.phase("seed 1: forward")
        bar.advance(4)
    text = stream.getvalue()
    assert "\r" in text and "seeds 0/4" in text and text.endswith("seeds 4/4 |" + "█" * 20 + "| 0:00\n")


def test_short_work_shows_nothing_before_the_delay():
    stream = FakeTerminal()
    with Progress(3, stream=stream, delay=60) as bar:
        bar.advance(3)
    assert stream.getvalue() == ""


def test_clear_erases_before_other_output():
    stream = FakeTerminal()
    bar = Progress(2, stream=stream, delay=0)
    bar.advance()
    bar.clear()
    assert stream.getvalue().endswith("\r\x1b[2K") and not bar.visible
    bar.close()  # not on screen: no final line after other output
    assert not stream.getvalue().endswith("\n")


ARGS = ["-m", "attnlab", "n_seeds=40", "log.tensorboard=false", "log.terminal=false", "log.table=false"]


@pytest.mark.slow
def test_cli_draws_the_bar_on_a_pseudo_terminal(tmp_path):
    master, slave = pty.openpty()
    env = {**os.environ, "ATTNLAB_PROGRESS_DELAY": "0"}
    proc = subprocess.Popen([sys.executable, *ARGS, f"hydra.run.dir={tmp_path}"], stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=slave, env=env, cwd=tmp_path)
    os.close(slave)
    chunks: list[bytes] = []

    def drain() -> None:
        while True:
            try:
                data = os.read(master, 4096)
            except OSError:  # EIO once the child closed its end
                return
            if not data:
                return
            chunks.append(data)

    reader = threading.Thread(target=drain, daemon=True)
    reader.start()
    proc.communicate(timeout=300)
    reader.join(timeout=10)
    os.close(master)
    terminal = b"".join(chunks).decode("utf-8", "replace")
    assert proc.returncode == 0
    assert "seeds 40/40" in terminal and "\r" in terminal


@pytest.mark.slow
def test_cli_is_quiet_on_a_pipe(tmp_path):
    env = {**os.environ, "ATTNLAB_PROGRESS_DELAY": "0"}
    proc = subprocess.run([sys.executable, *ARGS, f"hydra.run.dir={tmp_path}"], capture_output=True, text=True,
                          env=env, cwd=tmp_path, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "seeds 40/40" not in proc.stderr and "\r" not in proc.stderr and "█" not in proc.stderr
