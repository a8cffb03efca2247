"""dtype and reference_dtype: the variant runs in its dtype, the tolerances follow that dtype's
epsilon, what the rounding explains is the info finding `precision`, and a real bug is still found."""

from __future__ import annotations

import pytest
import torch

import attnlab
from attnlab.capture.recorder import capture
from attnlab.diagnosis.diagnostics import capture_eps, stage_tolerance
from attnlab.modules.built import plan

SMALL = dict(log={"tensorboard": False})


def _codes(record) -> list[tuple[str, str]]:
    return [(f.code, f.severity) for f in record.findings]


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_a_correct_variant_in_low_precision_gets_precision_only(dtype):
    record = attnlab.run("reference", dtype=dtype, **SMALL).record
    assert record.dtype == dtype and _codes(record) == [("precision", "info")]
    assert record.variant.stages["output"].dtype.name == "float32"  # stored for the sinks in float32, as ever
    assert f"{dtype}'s bound" in record.findings[0].message
    assert record.variant.diagnostics["divergence_output"] > 0  # the rounding is real, not hidden


def test_the_reference_in_low_precision_gives_precision_too():
    record = attnlab.run("reference", reference_dtype="bfloat16", **SMALL).record
    assert record.dtype == "float32" and _codes(record) == [("precision", "info")]


def test_a_real_bug_in_bfloat16_is_still_found():
    record = attnlab.run("unscaled", dtype="bfloat16", **SMALL).record
    assert record.findings[0].code == "scaling" and "precision" not in [f.code for f in record.findings]


@pytest.mark.parametrize("name", ["keys_as_queries", "shifted_keys"])
def test_value_comparisons_still_find_their_bug_in_bfloat16(name):
    record = attnlab.run(name, dtype="bfloat16", **SMALL).record
    assert record.findings[0].code == attnlab.modules.registry.get_variant(name).expected_finding[0]


def test_float64_is_no_precision_finding():
    record = attnlab.run("reference", dtype="float64", **SMALL).record
    assert record.findings == [] and record.first_divergent_stage is None


def test_float32_runs_are_unchanged():
    record = attnlab.run("multi_head_attention", **SMALL).record
    assert record.findings == [] and record.dtype == "float32"


def test_tolerances_scale_with_the_dtype_epsilon():
    values = dict(d_in=3, d_out=2, context_length=6, dropout=0.0, num_heads=2, qkv_bias=False, n_tokens=6,
                  num_kv_heads=None)
    x = torch.rand(2, 6, 3)
    module = plan("multi_head_attention", values).build(seed=1).module.eval()
    single = capture(module, x)
    half = capture(module.to(torch.bfloat16), x.to(torch.bfloat16))
    ratio = torch.finfo(torch.bfloat16).eps / torch.finfo(torch.float32).eps
    assert capture_eps(half) == torch.finfo(torch.bfloat16).eps and capture_eps(single) == torch.finfo(torch.float32).eps
    for stage in ("queries", "scores"):
        strict, loose = stage_tolerance(stage, single), stage_tolerance(stage, single, capture_eps(half))
        assert (loose - 1e-6) == pytest.approx((strict - 1e-6) * ratio)


@pytest.mark.slow
def test_bfloat16_through_the_cli(app):
    run = app("variant=unscaled", "dtype=bfloat16", "log.tensorboard=false")
    assert run.returncode == 0, run.stderr
    record = run.record
    assert record["dtype"] == "bfloat16" and record["device"] == "cpu"
    assert [f["code"] for f in record["findings"]][0] == "scaling"
    bad = app("dtype=half")
    assert bad.returncode != 0 and "dtype=half: allowed are float32, float64, bfloat16, float16" in bad.stderr
