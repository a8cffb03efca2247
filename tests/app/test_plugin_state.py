"""Issue 43 (9, 12): a plugin cannot change other runs. The reference is computed with torch's own
functions when a plugin replaced one in its forward; each module gets its own copy of the inputs; an
output that requires grad is detached before the diagnosis; a sweep's job worker retires after a
job that changed the process (umask, working folder), so the next job runs as attnlab made it."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys

import numpy as np
import pytest
import torch

import attnlab

PROJECTIONS = """
import os
import torch
import torch.nn as nn
{head}

class {name}(nn.Module):
    def __init__(self, d_in, d_out):
        super().__init__()
        self.W_query = nn.Parameter(torch.rand(d_in, d_out))
        self.W_key = nn.Parameter(torch.rand(d_in, d_out))
        self.W_value = nn.Parameter(torch.rand(d_in, d_out))

    def forward(self, x):
        {before}
        queries, keys, values = x @ self.W_query, x @ self.W_key, x @ self.W_value
        attn_weights = torch.softmax(queries @ keys.T / keys.shape[-1] ** 0.5, dim=-1)
        return attn_weights @ values
"""
HALVED_SOFTMAX = "_own = torch.softmax\nHALVED = lambda x, dim, **kw: _own(x * 0.5, dim=dim, **kw)\n"


def plugin(folder, name: str, before: str = "pass", head: str = "") -> None:
    folder.mkdir(exist_ok=True)
    (folder / f"{name.lower()}.py").write_text(PROJECTIONS.format(name=name, before=before, head=head))


def numpy_softmax(scores: np.ndarray) -> np.ndarray:
    shifted = np.exp(scores - scores.max(axis=-1, keepdims=True))
    return shifted / shifted.sum(axis=-1, keepdims=True)


@pytest.mark.slow
def test_the_reference_uses_torchs_own_softmax_when_a_plugin_replaced_it(tmp_path, monkeypatch) -> None:
    """Replaced in the forward (one replaced at import is put back at once: tests/modules/test_import_probe.py)."""
    monkeypatch.setattr(torch, "softmax", torch.softmax)  # the plugin's replacement is undone after the test
    plugin(tmp_path / "plugins", "Patched", before="torch.softmax = HALVED", head=HALVED_SOFTMAX)
    monkeypatch.chdir(tmp_path)
    record = attnlab.run("patched").record
    reference = record.reference.stages
    assert np.allclose(reference["weights"], numpy_softmax(reference["scaled_scores"]), atol=1e-6)
    assert [f.code for f in record.findings] != []  # the variant's halved scores are found


@pytest.mark.slow
def test_a_forward_that_changes_its_input_in_place_and_one_that_enables_grad(tmp_path, monkeypatch) -> None:
    plugin(tmp_path / "plugins", "Mutates", before="x.mul_(100)")
    plugin(tmp_path / "plugins", "Grads", before="torch.set_grad_enabled(True)")
    monkeypatch.chdir(tmp_path)
    book = np.array(attnlab.run("reference").record.config["inputs"]["embeddings"], dtype=np.float32)
    mutated = attnlab.run("mutates").record
    assert np.array_equal(mutated.variant.stages["inputs"].reshape(book.shape), book)
    assert np.array_equal(mutated.reference.stages["inputs"].reshape(book.shape), book)
    with torch.no_grad():  # the forward switches grad on inside the capture's no_grad only
        grads = attnlab.run("grads").record
    assert grads.ok and grads.first_divergent_stage is None, grads.error


@pytest.mark.slow
def test_a_job_that_changes_the_umask_and_folder_retires_its_worker(tmp_path) -> None:
    plugin(tmp_path / "plugins", "Meddles", before="os.umask(0); os.chdir('/')")
    env = {k: v for k, v in os.environ.items() if k not in ("HYDRA_FULL_ERROR", "ATTNLAB_ISOLATION")}
    run = subprocess.run([sys.executable, "-m", "attnlab", "-m", "variant=meddles,unscaled", "log.terminal=false",
                          "log.tensorboard=false", "log.html=false", f"hydra.sweep.dir={tmp_path / 'sweep'}"],
                         cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300,
                         preexec_fn=lambda: os.umask(0o022))
    assert run.returncode == 0, run.stderr
    after = next(p for p in (tmp_path / "sweep").glob("*/record.json") if json.loads(p.read_text())["variant"] == "unscaled")
    assert stat.S_IMODE(after.stat().st_mode) == 0o644  # the umask the command started with, not the job's 0


@pytest.mark.slow
def test_a_forward_calling_os_exit_in_a_single_run_fails_its_record(tmp_path) -> None:
    plugin(tmp_path / "plugins", "Exits", before="os._exit(0)")
    env = {k: v for k, v in os.environ.items() if k != "HYDRA_FULL_ERROR"}
    run = subprocess.run([sys.executable, "-m", "attnlab", "variant=exits", "log.terminal=false",
                          f"hydra.run.dir={tmp_path / 'run'}"], cwd=tmp_path, env=env, capture_output=True, text=True,
                         timeout=300)
    assert run.returncode == 1, run.stderr
    record = json.loads((tmp_path / "run" / "record.json").read_text())
    assert record["status"] == "failed" and "os._exit(0) called in forward" in record["error"]


@pytest.mark.slow
def test_a_clean_process_has_no_replaced_torch_function() -> None:
    code = "import torch\nfrom attnlab.process_state import replaced\nprint(replaced())"
    shown = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert shown.stdout.strip() == "[]", shown.stderr


REPLACED_AFTER_DYNAMO = """
import functools, torch
from attnlab.process_state import ORIGINALS, replaced
import torch._dynamo  # wraps torch.manual_seed in torch's own wrapper
print(torch.manual_seed is not ORIGINALS["torch"]["manual_seed"], replaced())
own = torch.softmax
torch.softmax = functools.wraps(own)(lambda *args, **kwargs: own(*args, **kwargs))  # a plugin's wrapper
print(replaced())
"""


@pytest.mark.slow
def test_torchs_own_wrapper_is_not_a_replacement_and_a_plugins_wrapper_is() -> None:
    shown = subprocess.run([sys.executable, "-c", REPLACED_AFTER_DYNAMO], capture_output=True, text=True, timeout=120)
    assert shown.stdout.splitlines() == ["True []", "['torch.softmax']"], shown.stderr
