"""The import probe's server: one process imports torch once, and each probe is a child forked from
it that sees the asking process's working folder and environment as a fresh child would."""

from __future__ import annotations

import os
import signal

import pytest

from attnlab.modules import probe_server

SEES = """
import os, sys
with open(os.environ["S60T_SEEN"], "w") as seen:
    seen.write(f"{os.getcwd()}\\n{os.environ['S60T_WORD']}\\n{'torch' in sys.modules}\\n{os.getppid()}")
"""


def test_each_probe_is_a_child_of_one_server_seeing_the_callers_folder_and_environment(tmp_path, monkeypatch) -> None:
    plugin, done, seen = tmp_path / "sees.py", tmp_path / "done", tmp_path / "seen"
    plugin.write_text(SEES)
    monkeypatch.setenv("S60T_SEEN", str(seen))
    servers = []
    for word in ("first", "second"):
        (tmp_path / word).mkdir()
        monkeypatch.chdir(tmp_path / word)
        monkeypatch.setenv("S60T_WORD", word)
        done.write_text("")
        assert probe_server.probe(str(done), [str(plugin)], 60) == 0
        assert done.read_text() == f"{plugin}\0"
        server = probe_server._servers[os.getpid()].process.pid
        assert seen.read_text().split("\n") == [str(tmp_path / word), word, "True", str(server)]
        servers.append(server)
    assert servers[0] == servers[1] != os.getpid()  # torch imported once, by the server


@pytest.mark.slow  # a new server imports torch again
def test_a_child_ending_its_process_or_a_killed_server_costs_only_that_probe(tmp_path) -> None:
    (tmp_path / "dies.py").write_text("import os\nos._exit(3)\n")
    (tmp_path / "segfaults.py").write_text("import ctypes\nctypes.string_at(0)\n")
    done = tmp_path / "done"
    done.write_text("")
    assert probe_server.probe(str(done), [str(tmp_path / "dies.py")], 60) == 3
    assert probe_server.probe(str(done), [str(tmp_path / "segfaults.py")], 60) == -signal.SIGSEGV
    server = probe_server._servers[os.getpid()].process
    server.kill()
    server.wait()
    assert probe_server.probe(str(done), [str(tmp_path / "dies.py")], 60) == 3  # a new server
    assert probe_server._servers[os.getpid()].process.pid != server.pid
