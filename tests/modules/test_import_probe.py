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
def test_an_import_that_does_not_finish_is_remembered_for_its_file_until_it_changes(plugin_folder, use_plugins,
                                                                                    tmp_path, monkeypatch) -> None:
    """The first discovery waits out the probe once and says how to retry; the next ones skip the file
    without a probe, for a day (HANG_MEMORY_S), unless ATTNLAB_RETRY_PLUGINS=1 or the file changed."""
    from attnlab.modules import import_probe

    monkeypatch.setenv("ATTNLAB_CACHE_DIR", str(tmp_path / "cache"))
    use_plugins(plugin_folder("hangs", "import time\ntime.sleep(600)\n" + GOOD))
    monkeypatch.setattr(import_probe, "PROBE_TIMEOUT_S", 2)
    probed: list[list] = []
    probe = import_probe._probe
    monkeypatch.setattr(import_probe, "_probe", lambda files: probed.append(files) or probe(files))
    hangs = tmp_path / "user_plugins" / "hangs.py"
    expected = [f"plugin {hangs} not loaded: its import did not finish in 2 s; skipped for a day or until the file "
                "changes (ATTNLAB_RETRY_PLUGINS=1 retries now)"]

    def rediscovered() -> list[str]:
        discover.cache_clear()
        return [w for w in discover().warnings if "hangs.py" in w]

    assert rediscovered() == expected and probed == [[hangs]]
    assert rediscovered() == expected and probed == [[hangs]]  # remembered: no second wait
    monkeypatch.setenv("ATTNLAB_RETRY_PLUGINS", "1")
    assert rediscovered() == expected and probed == [[hangs]] * 2  # retried now (and still hung)
    monkeypatch.delenv("ATTNLAB_RETRY_PLUGINS")
    monkeypatch.setattr(import_probe, "HANG_MEMORY_S", 0)
    assert rediscovered() == expected and probed == [[hangs]] * 3  # a day later: retried
    monkeypatch.setattr(import_probe, "HANG_MEMORY_S", 24 * 3600)
    monkeypatch.setattr(import_probe, "PROBE_TIMEOUT_S", 60)
    hangs.write_text(GOOD)  # fixed: retried at once, and it loads
    assert rediscovered() == [] and probed == [[hangs]] * 4
    assert "hangs" in attnlab.list_variants()


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


SHARPENS = """
import torch
import torch.nn.functional as F

_softmax = torch.softmax
torch.softmax = lambda x, dim=None, **kw: _softmax(2 * x, dim=dim)  # every softmax twice as sharp
F.softmax = torch.softmax
torch.Tensor.softmax = lambda self, dim=None, **kw: _softmax(2 * self, dim=dim)
"""


def test_a_plugin_replacing_torch_functions_at_import_leaves_other_variants_bitwise_alone(plugin_folder, use_plugins,
                                                                                         tmp_path, monkeypatch) -> None:
    from attnlab.process_state import ORIGINALS

    monkeypatch.setenv("ATTNLAB_CACHE_DIR", str(tmp_path / "cache"))

    def stages(variant: str) -> dict[str, dict[str, bytes]]:
        record = attnlab.run(variant, overrides=["log.tensorboard=false"]).record
        return {side: {stage: values.tobytes() for stage, values in getattr(record, side).stages.items()
                       if values is not None} for side in ("variant", "reference")}

    use_plugins(plugin_folder("good", GOOD))
    without = {name: stages(name) for name in ("good", "mha_unscaled")}
    folder = tmp_path / "sharpened"
    folder.mkdir()
    (folder / "good.py").write_text(GOOD)
    (folder / "sharpens.py").write_text(SHARPENS + GOOD)
    use_plugins(folder)
    assert (f"plugin {folder / 'sharpens.py'} replaced torch.softmax, torch.nn.functional.softmax, torch.Tensor.softmax "
            f"at import: undone (set it inside your module, not at import)") in discover().warnings
    assert torch.softmax is ORIGINALS["torch"]["softmax"] and "softmax" not in vars(torch.Tensor)
    assert {name: stages(name) for name in ("good", "mha_unscaled")} == without
