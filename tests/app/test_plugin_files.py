"""Issue 43 (8): plugin discovery reads only regular files; a FIFO, a folder or a dangling link named
`*.py` is skipped with a one-line warning (a FIFO hung every command, `--help` included)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from attnlab.plugin_folders import plugin_files

SKIPPED = ["dangling.py skipped: a dangling link, not a file", "fifo.py skipped: a FIFO, not a file",
           "folder.py skipped: a folder, not a file"]


@pytest.fixture
def odd_folder(tmp_path):
    folder = tmp_path / "plugins"
    folder.mkdir()
    os.mkfifo(folder / "fifo.py")
    (folder / "folder.py").mkdir()
    (folder / "dangling.py").symlink_to(tmp_path / "nowhere.py")
    (folder / "binary.py").write_bytes(bytes(range(256)))
    return folder


def test_only_regular_files_are_plugins(odd_folder, monkeypatch) -> None:
    monkeypatch.setenv("ATTNLAB_PLUGIN_PATH", str(odd_folder))
    skipped: list[str] = []
    found = [path for path, _ in plugin_files(skipped) if path.parent == odd_folder]
    assert found == [odd_folder / "binary.py"]
    assert skipped == [f"plugin {odd_folder / line}" for line in SKIPPED]


@pytest.mark.slow
def test_help_with_a_fifo_in_the_plugins_folder_ends_with_one_line_each(odd_folder, tmp_path) -> None:
    env = {**os.environ, "ATTNLAB_PLUGIN_PATH": str(odd_folder), "ATTNLAB_CACHE_DIR": str(tmp_path / "cache")}
    shown = subprocess.run([sys.executable, "-m", "attnlab", "--help"], cwd=tmp_path, env=env, capture_output=True,
                           text=True, timeout=120)
    assert shown.returncode == 0 and "Traceback" not in shown.stderr
    warnings = shown.stderr.splitlines()
    assert all(f"attnlab: warning: plugin {odd_folder / line}" in warnings for line in SKIPPED)
    assert any(line.startswith(f"attnlab: warning: plugin {odd_folder / 'binary.py'} failed to import") for line in warnings)
