"""attnlab.compute.profile: time, peak memory and FLOPs of the plain module, and the profile columns of a run.

FLOPs are checked against the arithmetic of the shapes (2 x multiply-adds of each product), the
memory against a tensor of known size, the timer against a known sleep; none against attnlab.
"""

from __future__ import annotations

import math
import sys
import time

import pytest
import torch
from torch import nn

import attnlab
from attnlab.compute import pipeline, profile
from attnlab.errors import UserError
from attnlab.modules.built import plan
from attnlab.record import from_json_dict, to_json_dict

PROFILE_KEYS = ("forward_ms", "forward_ms_iqr", "backward_ms", "peak_bytes", "flops",
                "forward_ms_vs_reference", "peak_bytes_vs_reference")
SMALL = dict(inputs="random", d_out=8, num_heads=2, log={"tensorboard": False})


def _mha_flops(b: int, n: int, d_in: int, d_out: int) -> int:
    """W_query, W_key, W_value and out_proj, then attn_scores and attn_weights @ values, dense."""
    return 2 * b * n * d_in * d_out * 3 + 2 * b * n * d_out * d_out + 2 * 2 * b * n * n * d_out


def _module(name: str, d: int = 16, heads: int = 4, n: int = 12) -> nn.Module:
    values = dict(d_in=d, d_out=d, context_length=n, dropout=0.0, num_heads=heads, qkv_bias=False,
                  n_tokens=n, num_kv_heads=None)
    return plan(name, values).build(seed=1).module.eval()


def test_linear_flops_are_twice_the_multiply_adds():
    x = torch.randn(3, 5, 7)
    assert profile.count_flops(lambda: nn.Linear(7, 11)(x)) == 2 * 3 * 5 * 7 * 11


@pytest.mark.parametrize("name", ["impl_mha", "impl_einsum", "impl_combined_qkv", "impl_sdpa", "impl_sdpa_mask",
                                  "impl_flex_attention", "impl_wrapper"])
def test_every_kernel_counts_the_dense_products(name):
    """SDPA's CPU kernel and FlexAttention are not counted by torch's counter; a causal mask does not halve."""
    x = torch.randn(2, 12, 16)
    module = _module(name)
    with torch.no_grad():
        assert profile.count_flops(lambda: module(x)) == _mha_flops(2, 12, 16, 16)


@pytest.mark.parametrize("name", ["impl_torch_mha", "impl_torch_mha_no_weights"])
def test_nn_multihead_attention_counts_its_second_projection(name):
    """The notebook's MHAPyTorchClass adds `proj` after nn.MultiheadAttention's own out_proj."""
    x = torch.randn(2, 12, 16)
    module = _module(name)
    with torch.no_grad():
        assert profile.count_flops(lambda: module(x)) == _mha_flops(2, 12, 16, 16) + 2 * 2 * 12 * 16 * 16


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the CPU peak is the Linux high-water mark")
def test_cpu_peak_is_measured():
    n = 16 * 2**20  # 64 MiB of float32, well above malloc's mmap threshold
    peak = profile.peak_bytes(lambda: torch.ones(n).sum(), torch.device("cpu"))
    assert 0.9 * 4 * n <= peak <= 2 * 4 * n
    assert profile.peak_bytes(lambda: None, torch.device("cpu")) < 4 * n / 8


def test_timer_median_and_iqr():
    median, iqr = profile.time_call(lambda: time.sleep(0.01), 0.2)
    assert 10 <= median < 40 and 0 <= iqr < median


def test_backward_is_nan_where_the_kernel_has_none():
    x = torch.randn(2, 12, 16)
    assert math.isnan(profile.time_backward(_module("impl_flex_attention"), x, 0.05))  # no backward on the CPU
    assert profile.time_backward(_module("impl_mha"), x, 0.05) > 0


def test_profile_columns_in_the_record_and_its_json():
    record = attnlab.run("impl_mha", reference="multi_head_attention", profile=True, profile_budget_s=0.2,
                         profile_backward=True, **SMALL).record
    assert set(PROFILE_KEYS) <= set(record.variant.diagnostics) and set(PROFILE_KEYS) <= set(record.profile)
    for key in ("forward_ms", "backward_ms", "flops", "forward_ms_vs_reference"):
        assert record.variant.diagnostics[key] > 0
    assert record.variant.diagnostics["peak_bytes"] >= 0  # a few hundred bytes reuse pages the process holds: 0 here
    assert record.variant.diagnostics["flops"] == _mha_flops(2, 6, 3, 8)
    back = from_json_dict(to_json_dict(record))
    assert back.profile == pytest.approx(record.profile, nan_ok=True) and back.device == "cpu" and back.dtype == "float32"


def test_profiling_changes_no_diagnosed_value():
    plain = attnlab.run("causal_attention", **SMALL).record
    profiled = attnlab.run("causal_attention", profile=True, profile_budget_s=0.1, **SMALL).record
    assert {k: v for k, v in profiled.variant.diagnostics.items() if k not in PROFILE_KEYS} == pytest.approx(
        plain.variant.diagnostics, nan_ok=True)
    assert all((profiled.variant.stages[s] == plain.variant.stages[s]).all() for s in plain.variant.stages)


def test_a_run_without_profile_pays_nothing(monkeypatch):
    def forbidden(*args, **kwargs):
        raise AssertionError("profiled with profile=false")

    monkeypatch.setattr(pipeline, "profile_pair", forbidden)
    record = attnlab.run("reference").record
    assert record.profile == {} and not set(PROFILE_KEYS) & set(record.variant.diagnostics)


def test_each_job_profiles_its_own_reference(monkeypatch):
    """Jobs in one process (a sweep run in process) share nothing: each measures its own reference,
    and its "x reference" ratio is to that reference. forward_ms is replaced by the FLOP count so
    that the ratios are exact and checkable against the products' arithmetic."""
    calls = []
    real = profile.profile_module

    def by_flops(built, x, **kw):
        calls.append(built.name)
        measured = real(built, x, **kw)
        return {**measured, "forward_ms": measured["flops"]}

    monkeypatch.setattr(profile, "profile_module", by_flops)
    mha = _mha_flops(2, 6, 8, 8)
    torch_mha = mha + 2 * 2 * 6 * 8 * 8  # the notebook's MHAPyTorchClass projects once more after out_proj
    ratios = {}
    for reference in ("multi_head_attention", "impl_torch_mha", "multi_head_attention"):
        record = attnlab.run("impl_mha", reference=reference, profile=True, profile_budget_s=0.05,
                             overrides=["inputs.d_in=8"], **SMALL).record
        ratios.setdefault(reference, []).append(record.variant.diagnostics["forward_ms_vs_reference"])
    assert calls == ["impl_mha", "multi_head_attention", "impl_mha", "impl_torch_mha", "impl_mha",
                     "multi_head_attention"]
    assert ratios == {"multi_head_attention": [1.0, 1.0], "impl_torch_mha": [mha / torch_mha]}


@pytest.mark.parametrize(("override", "message"), [
    ("dtype=int8", "dtype=int8: allowed are float32, float64, bfloat16, float16"),
    ("reference_dtype=half", "reference_dtype=half: allowed are"),
    ("device=tpu", "device=tpu: allowed are cpu, cuda, mps, auto"),
    ("profile_budget_s=0", r"profile_budget_s=0: must be a number of seconds in \(0, 3600\]"),
])
def test_wrong_values_are_one_line_errors(override, message):
    with pytest.raises(UserError, match=message):
        attnlab.run("reference", overrides=[override])


def test_device_auto_and_the_record():
    expected = "cuda" if torch.cuda.is_available() else (
        "mps" if torch.backends.mps.is_available() else "cpu")
    assert attnlab.run("reference", device="auto").record.device == expected
    assert attnlab.run("reference").record.device == "cpu"


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a GPU")
def test_cuda_without_a_gpu_is_a_one_line_error():
    with pytest.raises(UserError, match="device=cuda: not available on this machine"):
        attnlab.run("reference", device="cuda")


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA GPU on this machine")
def test_cuda_gives_the_cpu_numbers_and_measures_its_memory():
    """Weights and inputs are drawn on the CPU generator and moved: the seed means the same numbers."""
    cpu = attnlab.run("multi_head_attention", seed=5, **SMALL).record
    gpu = attnlab.run("multi_head_attention", seed=5, device="cuda", profile=True, profile_budget_s=0.1,
                      **SMALL).record
    assert gpu.device == "cuda" and gpu.findings == cpu.findings
    assert gpu.variant.stages["output"] == pytest.approx(cpu.variant.stages["output"], abs=1e-4)
    assert gpu.variant.diagnostics["peak_bytes"] > 0
