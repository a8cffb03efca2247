"""`attnlab --help` printed from attnlab's cache once printed (attnlab.app.help_cache): the same text,
without importing torch, and never stale: a new plugin file changes it."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from attnlab.app import help_cache

PLUGIN = '''
import torch
from torch import nn


class MyOwnAttention(nn.Module):
    """attention of my own, for the help's list"""

    def __init__(self, d_in, d_out):
        super().__init__()
        self.W_query = nn.Linear(d_in, d_out, bias=False)

    def forward(self, x):
        return self.W_query(x)
'''


def test_the_cache_reads_what_attnlab_reads() -> None:
    from attnlab.modules import discovery, import_probe

    assert help_cache.ENTRY_POINT_GROUP == discovery.ENTRY_POINT_GROUP
    assert help_cache.CACHE_ENV == import_probe.CACHE_ENV


@pytest.mark.slow
def test_help_is_printed_again_without_torch_and_a_new_plugin_is_in_it(tmp_path) -> None:
    env = {**{k: v for k, v in os.environ.items() if k != "HYDRA_FULL_ERROR"}, "ATTNLAB_CACHE_DIR": str(tmp_path / "cache")}

    def helped(*python: str) -> subprocess.CompletedProcess:
        done = subprocess.run([sys.executable, *python, "-m", "attnlab", "--help"], cwd=tmp_path, env=env,
                              capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr
        return done

    first = helped()
    again = helped("-X", "importtime")
    assert again.stdout == first.stdout and "Variants (variant=NAME" in first.stdout
    imported = [line.rpartition("|")[2].strip() for line in again.stderr.splitlines() if line.startswith("import time")]
    assert "hydra" not in imported and not [name for name in imported if name.split(".")[0] == "torch"]
    (tmp_path / "plugins").mkdir()
    (tmp_path / "plugins" / "my_own.py").write_text(PLUGIN)
    assert "MyOwnAttention" not in first.stdout and "MyOwnAttention" in helped().stdout
