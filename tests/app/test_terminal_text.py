"""Issue 43 (12): control characters (ESC, BEL, U+202E) in a plugin's description, an input's label
or an error reach the terminal escaped, never raw; a text cell starting with a tab is guarded in
comparison.csv as a formula is."""

from __future__ import annotations

import csv
import os
import subprocess
import sys

import pytest

from attnlab.reporting.rows import write_rows_csv

HOSTILE = "\x1b]0;owned\x07\u202e"
PLUGIN = f'''
import torch
import torch.nn as nn


class Hostile(nn.Module):
    """Looks fine {HOSTILE!s} until shown."""

    def __init__(self, d_in, d_out):
        super().__init__()
        self.W_value = nn.Parameter(torch.rand(d_in, d_out))

    def forward(self, x):
        raise ValueError("broken {HOSTILE!s}")
'''
RAW = ("\x1b", "\x07", "\u202e")


def attnlab(tmp_path, *args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "HYDRA_FULL_ERROR"}
    return subprocess.run([sys.executable, "-m", "attnlab", *args], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=300)


@pytest.mark.slow
def test_help_errors_and_labels_reach_the_terminal_escaped(tmp_path) -> None:
    (tmp_path / "plugins").mkdir()
    (tmp_path / "plugins" / "hostile.py").write_text(PLUGIN.replace("\x1b", "\\x1b").replace("\x07", "\\x07")
                                                     .replace("\u202e", "\\u202e"))
    shown = attnlab(tmp_path, "--help")
    assert "hostile" in shown.stdout and "\\x1b]0;owned\\x07\\u202e" in shown.stdout
    failed = attnlab(tmp_path, "variant=hostile", f"hydra.run.dir={tmp_path / 'run'}")
    (tmp_path / "labels.csv").write_text(f"a{HOSTILE},1,2,3\nb,4,5,6\n", encoding="utf-8")
    labelled = attnlab(tmp_path, "inputs=file", f"inputs.path={tmp_path / 'labels.csv'}", f"hydra.run.dir={tmp_path / 'l'}")
    assert labelled.returncode == 0, labelled.stderr
    for output in (shown.stdout, shown.stderr, failed.stdout, failed.stderr, labelled.stdout, labelled.stderr):
        assert not any(char in output for char in RAW)
    assert "broken \\x1b]0;owned" in failed.stdout + failed.stderr


def test_a_cell_starting_with_a_tab_is_guarded(tmp_path) -> None:
    path = write_rows_csv([{"variant": "\t=cmd()", "seed": 1}], tmp_path / "table.csv")
    with path.open(newline="") as handle:
        row = next(csv.DictReader(handle))
    assert row == {"variant": "'\t=cmd()", "seed": "1"}
