"""The memory pre-flight: an estimate from the shapes, the limit the process has, one line when
a run does not fit (the estimate's accuracy against measured peaks is a benchmark figure)."""

from __future__ import annotations

import pytest

from attnlab.compute import memory
from attnlab.compute.memory import Size, available_bytes, check_fits, estimate_peak_bytes, should_spill
from attnlab.errors import UserError

BIG = Size(batch=2, heads=12, n_tokens=4096, d_in=768, d_out=768)


def test_the_estimate_grows_with_every_axis_and_spilling_lowers_it():
    base = estimate_peak_bytes(Size(1, 1, 512, 64, 64), spilled=False)
    for bigger in (Size(2, 1, 512, 64, 64), Size(1, 2, 512, 64, 64), Size(1, 1, 1024, 64, 64)):
        assert estimate_peak_bytes(bigger, spilled=False) > base
    assert estimate_peak_bytes(BIG, spilled=True) < estimate_peak_bytes(BIG, spilled=False)
    assert BIG.stage_bytes == 2 * 12 * 4096 * 4096 * 4


def test_the_limit_comes_from_the_environment_then_the_cgroup(monkeypatch, tmp_path):
    monkeypatch.setenv(memory.LIMIT_ENV, "123456789")
    assert available_bytes() == (123456789, memory.LIMIT_ENV)
    monkeypatch.delenv(memory.LIMIT_ENV)
    (tmp_path / "max").write_text("1000000000\n")
    (tmp_path / "current").write_text("400000000\n")
    monkeypatch.setattr(memory, "CGROUP_MAX", tmp_path / "max")
    monkeypatch.setattr(memory, "CGROUP_CURRENT", tmp_path / "current")
    monkeypatch.setattr(memory, "_own_rss", lambda: 0)
    assert available_bytes() == (600_000_000, "the cgroup's memory.max")


def test_large_stages_spill_and_a_run_that_cannot_fit_is_refused(monkeypatch):
    monkeypatch.setenv(memory.LIMIT_ENV, str(64 * 2**30))
    assert should_spill(BIG) and not should_spill(Size(2, 12, 1024, 768, 768))
    monkeypatch.setenv(memory.LIMIT_ENV, str(2 * 2**30))
    with pytest.raises(UserError, match=r"needs about .* GiB \(batch 2 x 12 heads x 4096² tokens.*shrink it"):
        check_fits(BIG, spilled=True)


@pytest.mark.slow
def test_the_cli_refuses_a_run_too_large_before_any_forward(app):
    run = app("variant=multi_head_attention", "inputs=random", "inputs.n_tokens=100000", "inputs.d_in=8",
              "d_out=8", env={memory.LIMIT_ENV: str(4 * 2**30)})
    assert run.returncode == 2
    lines = run.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("attnlab: error: this run needs about")
    assert "4.0 GiB is available (ATTNLAB_MEMORY_LIMIT)" in lines[0]
    assert "(batch 2 x at least 1 head x 100000² tokens" in lines[0]  # before the module names its heads: a floor
    assert not (run.out_dir / "record.json").exists()
