"""A plugin that ends its process or changes torch's global state at import costs only itself."""

from __future__ import annotations

import pytest
import torch

import attnlab
from attnlab.modules.registry import discover

GOOD = """
import torch
import torch.nn as nn

class Good(nn.Module):
    def __init__(self, d_in, d_out):
        super().__init__()
        self.W_query = nn.Parameter(torch.rand(d_in, d_out))
        self.W_key = nn.Parameter(torch.rand(d_in, d_out))
        self.W_value = nn.Parameter(torch.rand(d_in, d_out))

    def forward(self, x):
        queries, keys, values = x @ self.W_query, x @ self.W_key, x @ self.W_value
        attn_weights = torch.softmax(queries @ keys.T / keys.shape[-1] ** 0.5, dim=-1)
        return attn_weights @ values
"""
DYING = {"exits_hard": "import os\nos._exit(0)\n", "segfaults": "import ctypes\nctypes.string_at(0)\n",
         "exits": "import sys\nsys.exit(7)\n"}
POISON = "import torch\ntorch.set_default_dtype(torch.float64)\ntorch.manual_seed(5)\ntorch.set_grad_enabled(False)\n"


@pytest.mark.slow
def test_a_plugin_dying_at_import_costs_only_its_file(plugin_folder, use_plugins, tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("ATTNLAB_CACHE_DIR", str(tmp_path / "cache"))
    for name, source in DYING.items():
        folder = plugin_folder(name, source)
    use_plugins(plugin_folder("good", GOOD))
    warnings = discover().warnings
    assert any(w == f"plugin {folder / 'exits_hard.py'} not loaded: its import ended the process (exit code 0: os._exit)"
               for w in warnings), warnings
    assert f"plugin {folder / 'segfaults.py'} not loaded: its import killed the process (SIGSEGV, a segfault)" in warnings
    assert f"plugin {folder / 'exits.py'} failed to import: SystemExit: 7" in warnings
    assert attnlab.run("good", overrides=["log.tensorboard=false"]).record.ok


@pytest.mark.slow
def test_an_import_that_runs_out_of_time_is_not_remembered(plugin_folder, use_plugins, tmp_path,
                                                          monkeypatch) -> None:
    """A busy machine's slow import is this run's verdict only: the next discovery probes it again."""
    from attnlab.modules import import_probe

    monkeypatch.setenv("ATTNLAB_CACHE_DIR", str(tmp_path / "cache"))
    use_plugins(plugin_folder("slow", "import time\ntime.sleep(3)\n" + GOOD))
    monkeypatch.setattr(import_probe, "PROBE_TIMEOUT_S", 1)
    folder = tmp_path / "user_plugins"
    assert f"plugin {folder / 'slow.py'} not loaded: its import did not finish in 1 s" in discover().warnings
    monkeypatch.setattr(import_probe, "PROBE_TIMEOUT_S", 60)
    discover.cache_clear()
    assert "slow" in attnlab.list_variants()


@pytest.mark.slow
def test_a_plugin_changing_torchs_global_state_is_undone_and_named(plugin_folder, use_plugins, tmp_path,
                                                                   monkeypatch) -> None:
    monkeypatch.setenv("ATTNLAB_CACHE_DIR", str(tmp_path / "cache"))
    torch.manual_seed(11)
    expected = torch.rand(3)
    torch.manual_seed(11)
    use_plugins(plugin_folder("poisons", POISON))
    warnings = discover().warnings
    assert torch.get_default_dtype() == torch.float32 and torch.is_grad_enabled()
    assert torch.equal(torch.rand(3), expected)  # the random stream goes on as if no plugin had been imported
    folder = tmp_path / "user_plugins"
    assert (f"plugin {folder / 'poisons.py'} changed torch's default dtype, random state, grad mode at import: "
            f"undone (set it inside your module, not at import)") in warnings
