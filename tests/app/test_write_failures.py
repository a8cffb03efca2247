"""Issue 43 (5): a write that fails (here a real file-size limit, RLIMIT_FSIZE) is one line naming
the file and the cause: no Hydra "Error executing job" line, no traceback."""

from __future__ import annotations

import os
import resource
import subprocess
import sys
from contextlib import suppress

import pytest
from omegaconf import OmegaConf

import attnlab
from attnlab.record.files import WriteError
from hydra_plugins.attnlab_sweeper.folder import LOCK_FILE, locked, write_multirun_yaml

pytestmark = pytest.mark.skipif(not hasattr(resource, "RLIMIT_FSIZE"), reason="no RLIMIT_FSIZE on this system")


def limited(size: int):
    def apply() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (size, size))
    return apply


def attnlab_limited(tmp_path, size: int, *args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("HYDRA_FULL_ERROR", "ATTNLAB_TRACEBACK")}
    return subprocess.run([sys.executable, "-m", "attnlab", *args], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=300, preexec_fn=limited(size))


@pytest.mark.slow
def test_a_run_past_the_file_size_limit_is_one_line(tmp_path) -> None:
    run = attnlab_limited(tmp_path, 20_000, "variant=unscaled", "log.terminal=false", f"hydra.run.dir={tmp_path / 'run'}")
    assert run.returncode == 1
    lines = run.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("attnlab: error: ") and "File too large" in lines[0], run.stderr
    assert f"{tmp_path / 'run'}" in lines[0]


@pytest.mark.slow
def test_compare_into_a_file_past_the_limit_is_one_line(tmp_path) -> None:
    attnlab.run("unscaled", out_dir=tmp_path / "job", log={"tensorboard": False, "html": False})
    out = tmp_path / "table.html"
    shown = attnlab_limited(tmp_path, 1_000, "compare", str(tmp_path / "job"), "--out", str(out))
    assert shown.returncode == 1
    assert shown.stderr.splitlines() == [f"attnlab compare: error: {tmp_path}: cannot write table.html: File too large"]


@pytest.fixture
def full_disk(tmp_path):
    """A real file system with no space left: a small tmpfs, filled (root only)."""
    mount = tmp_path / "disk"
    mount.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(mount)], capture_output=True).returncode:
        pytest.skip("cannot mount a tmpfs here (not root)")
    try:
        (mount / "sweep").mkdir()
        with suppress(OSError), (mount / "filler").open("wb") as filler:
            while True:
                filler.write(b"\0" * 4096)
        yield mount
    finally:
        subprocess.run(["umount", str(mount)], check=True)


def test_a_resume_on_a_full_disk_names_the_folder(full_disk) -> None:
    """The sweep's first write, its lock's note, fails: one line naming the folder and the cause."""
    folder = full_disk / "sweep"
    with pytest.raises(WriteError) as raised, locked(folder, "-m seed=1,2"):
        pass
    assert str(raised.value) == f"{folder}: cannot write {LOCK_FILE}: No space left on device"
    with pytest.raises(WriteError) as raised:
        write_multirun_yaml(folder, OmegaConf.create({"seed": 1}))
    assert str(raised.value) == f"{folder}: cannot write multirun.yaml: No space left on device"
