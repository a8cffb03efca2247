"""Spilled stages: the same values from a memory-mapped .npy, and their pages released after a pass."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
import torch

import attnlab
from attnlab.capture.spill import as_numpy, mapped, release, spill
from attnlab.compute import memory


def _rss() -> int:
    return int(Path("/proc/self/statm").read_text().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def test_spilled_stages_keep_their_values_and_are_never_pickled(tmp_path):
    stages = {"weights": torch.rand(2, 3, 5, 5), "context": torch.rand(2, 3, 5, 4)}
    before = stages["weights"].clone()
    assert spill(stages, ["weights", "missing"], tmp_path, prefix="reference-") == ["weights"]
    assert torch.equal(stages["weights"], before)
    np.load(tmp_path / "reference-weights.npy", allow_pickle=False)  # plain .npy
    assert isinstance(stages["weights"]._attnlab_memory_map, np.memmap)  # read from the file, not held


@pytest.mark.slow
def test_release_gives_back_the_pages_a_pass_read(tmp_path):
    np.save(tmp_path / "big.npy", np.ones((64, 1024, 1024), dtype=np.float32))  # 256 MiB
    tensor = mapped(tmp_path / "big.npy")
    start = _rss()
    assert float(tensor.sum()) == 64 * 1024 * 1024
    touched = _rss()
    release(tensor)
    assert touched - start > 200 * 2**20
    assert _rss() - start < 50 * 2**20


def test_a_spilled_run_gives_the_same_record(monkeypatch):
    plain = attnlab.run("multi_head_attention", inputs="random", overrides=["inputs.n_tokens=16", "inputs.d_in=4"])
    monkeypatch.setattr(memory, "SPILL_STAGE_BYTES", 1)
    spilled = attnlab.run("multi_head_attention", inputs="random", overrides=["inputs.n_tokens=16", "inputs.d_in=4"])
    assert spilled.record.scratch is not None and plain.record.scratch is None
    for ours, theirs in ((plain.record.reference.stages, spilled.record.reference.stages),
                         (plain.record.variant.stages, spilled.record.variant.stages)):
        for stage, values in ours.items():
            np.testing.assert_array_equal(values, theirs[stage])
    assert plain.record.findings == spilled.record.findings
    assert plain.record.variant.diagnostics.keys() == spilled.record.variant.diagnostics.keys()
    assert all(np.isclose(plain.record.variant.diagnostics[k], spilled.record.variant.diagnostics[k], equal_nan=True)
               for k in plain.record.variant.diagnostics)


@pytest.mark.slow
def test_release_reaches_a_numpy_view_of_a_spilled_stage(tmp_path):
    np.save(tmp_path / "big.npy", np.ones((64, 1024, 1024), dtype=np.float32))  # 256 MiB
    view = as_numpy(mapped(tmp_path / "big.npy"))[1:]  # what a record's sinks read: a view of the map
    start = _rss()
    assert float(view.sum()) == 63 * 1024 * 1024
    touched = _rss()
    release(view)
    assert touched - start > 200 * 2**20 and _rss() - start < 50 * 2**20
