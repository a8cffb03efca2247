"""Issue 43 (11): files written with the user's umask; attnlab's locks in a private folder, opened
without following links, given up after a timeout with one line naming the holder; MLflow's
telemetry off unless the user turns it on."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import textwrap
import time

import pytest

from attnlab.errors import UserError
from attnlab.locks import locked, private_dir
from attnlab.record import write_atomic


@pytest.mark.parametrize("umask", [0o077, 0o022, 0o002])
def test_write_atomic_honours_the_umask(umask, tmp_path) -> None:
    old = os.umask(umask)
    try:
        write_atomic(tmp_path / "atomic.txt", "x")
        with open(tmp_path / "plain.txt", "w") as handle:  # what an ordinary open() makes
            handle.write("x")
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "atomic.txt").stat().st_mode) == stat.S_IMODE((tmp_path / "plain.txt").stat().st_mode)


def test_the_lock_folder_is_private(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))
    assert stat.S_IMODE(private_dir().stat().st_mode) == 0o700
    (tmp_path / "attnlab").chmod(0o755)
    with pytest.raises(UserError, match="mode 755"):
        private_dir()


def test_a_planted_link_is_never_followed(tmp_path) -> None:
    target = tmp_path / "victim"
    (tmp_path / "x.lock").symlink_to(target)
    with pytest.raises(UserError, match="x.lock: cannot open the lock"):
        with locked(tmp_path / "x.lock", "a test"):
            pass
    assert not target.exists()


def test_a_held_lock_times_out_naming_its_holder(tmp_path, monkeypatch) -> None:
    path = tmp_path / "held.lock"
    holder = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
        import time
        from pathlib import Path
        from attnlab.locks import locked
        with locked(Path({str(path)!r}), "a test"):
            print("held", flush=True)
            time.sleep(60)
        """)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        monkeypatch.setenv("ATTNLAB_LOCK_TIMEOUT_S", "0.5")
        started = time.monotonic()
        with pytest.raises(UserError, match=f"held by pid {holder.pid} ") as caught:
            with locked(path, "a test"):
                pass
        assert time.monotonic() - started < 5 and "\n" not in str(caught.value)
    finally:
        holder.kill()
        holder.wait()


@pytest.mark.slow
def test_mlflow_telemetry_is_off_unless_the_user_turns_it_on(tmp_path, monkeypatch) -> None:
    pytest.importorskip("mlflow")
    probe = textwrap.dedent("""
        import os
        from mlflow.telemetry.client import get_telemetry_client
        from attnlab.sinks.mlflow import import_mlflow
        import_mlflow()
        print(os.environ["MLFLOW_DISABLE_TELEMETRY"], get_telemetry_client())
        """)
    env = {k: v for k, v in os.environ.items() if k not in ("MLFLOW_DISABLE_TELEMETRY", "DO_NOT_TRACK")}
    env.update(PATH=os.environ["PATH"], HOME=str(tmp_path))
    shown = subprocess.run([sys.executable, "-c", probe], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert shown.stdout.split() == ["true", "None"], shown.stderr
    monkeypatch.setenv("MLFLOW_DISABLE_TELEMETRY", "false")  # the user's choice stands
    from attnlab.sinks.mlflow import import_mlflow

    import_mlflow()
    assert os.environ["MLFLOW_DISABLE_TELEMETRY"] == "false"
