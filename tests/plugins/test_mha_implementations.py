"""The nine implementations of the source's bonus notebook (plugins/implementations/impl_*.py), its two historical
bugs, and `+experiment=mha_implementations`.

Each built-in is checked against the notebook's own class (tests/fixtures/source/mha_implementations.py)
on the same parameters; what attnlab says about them is checked against what the code does.
"""

from __future__ import annotations

import csv

import numpy as np
import pytest
import torch

import attnlab
from attnlab.modules.built import plan

NINE = {  # built-in -> the notebook's class
    "impl_wrapper": "Ch03_MHA_Wrapper", "impl_mha": "Ch03_MHA", "impl_combined_qkv": "MultiHeadAttentionCombinedQKV",
    "impl_einsum": "MHAEinsum", "impl_sdpa": "MHAPyTorchScaledDotProduct", "impl_sdpa_mask": "MHAPyTorchSDPAWithoutFlash",
    "impl_torch_mha": "MHAPyTorchClass", "impl_torch_mha_no_weights": "MHAPyTorchClass",
    "impl_flex_attention": "MHAPyTorchFlexAttention",
}
SIZE = dict(d_in=24, d_out=24, num_heads=4, n_tokens=10)
RUN = ["inputs=random", "inputs.n_tokens=10", "inputs.d_in=24", "d_out=24", "num_heads=4", "log.tensorboard=false"]


def _values(d_in: int, d_out: int, num_heads: int, n_tokens: int) -> dict:
    return dict(d_in=d_in, d_out=d_out, context_length=n_tokens, dropout=0.0, num_heads=num_heads, qkv_bias=False,
                n_tokens=n_tokens, num_kv_heads=None)


@pytest.mark.parametrize("name", NINE)
def test_each_built_in_computes_what_the_notebook_class_computes(name, mha_impls):
    d, heads, n = SIZE["d_in"], SIZE["num_heads"], SIZE["n_tokens"]
    ours = plan(name, _values(d, d, heads, n)).build(seed=3).module.eval()
    if name == "impl_wrapper":  # the notebook builds it with d_out = embed_dim // num_heads
        theirs = mha_impls.Ch03_MHA_Wrapper(d, d // heads, n, 0.0, heads)
    elif name == "impl_torch_mha_no_weights":
        theirs = mha_impls.MHAPyTorchClass(d, d, heads, n, need_weights=False)
    else:
        theirs = getattr(mha_impls, NINE[name])(d_in=d, d_out=d, context_length=n, dropout=0.0, num_heads=heads)
    theirs.load_state_dict(ours.state_dict())
    x = torch.randn(2, n, d, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        torch.testing.assert_close(ours(x), theirs.eval()(x), equal_nan=True)


@pytest.mark.parametrize("name", sorted(set(NINE) - {"impl_sdpa_mask"}))
def test_eight_match_multi_head_attention(name):
    record = attnlab.run(name, overrides=[*RUN, "reference=multi_head_attention"]).record
    assert record.status == "ok" and record.findings == [], record.findings


def test_the_sdpa_explicit_mask_attends_to_the_future():
    """scaled_dot_product_attention reads a bool mask's True as "may attend": the chapter's mask
    (True above the diagonal) lets each query see only later keys, and the last token none."""
    record = attnlab.run("impl_sdpa_mask", overrides=[*RUN, "reference=multi_head_attention"]).record
    assert record.findings and (record.findings[0].stage, record.findings[0].severity) == ("scaled_scores", "error")
    hidden = np.isneginf(record.variant.stages["scaled_scores"][0, 0])
    assert (hidden == np.tril(np.ones((10, 10), dtype=bool))).all()  # each query's own and earlier keys hidden
    x = torch.randn(1, 1, 4, 2)
    mask = torch.triu(torch.ones(4, 4), diagonal=1).bool()
    out = torch.nn.functional.scaled_dot_product_attention(x, x, x, attn_mask=mask)
    assert (out[0, 0, -1] == 0).all() and torch.isfinite(out).all()  # torch's kernel: a blind query gets zeros
    assert (record.variant.stages["weights"][0, 0, -1] == 0).all()  # reconstructed as the kernel computes it


def test_nn_multihead_attention_has_a_second_output_projection():
    record = attnlab.run("impl_torch_mha", overrides=[*RUN, "reference=multi_head_attention"]).record
    assert record.weights_loaded["proj.weight"].startswith("identity")


@pytest.mark.parametrize("name", ["impl_combined_qkv", "impl_torch_mha"])
def test_two_of_the_nine_need_d_in_equal_to_d_out(name):
    """Combined QKV reshapes the context to the input's width (embed_dim); nn.MultiheadAttention's
    embed_dim is both widths."""
    record = attnlab.run(name, overrides=["inputs=random", "inputs.n_tokens=10", "inputs.d_in=24", "d_out=12",
                                          "num_heads=4", "reference=multi_head_attention"]).record
    assert record.status == "failed" and "\n" not in record.error


def test_the_undivided_wrapper_is_found_by_its_width():
    record = attnlab.run("impl_wrapper_undivided", overrides=RUN).record
    assert record.reference.name == "multi_head_attention"
    assert record.variant.shapes["output"] == [2, 10, 4 * 24]  # num_heads * d_out columns, not d_out
    assert record.findings and record.findings[0].code == "shape_projection"
    assert "head_dim=6 per head" in record.findings[0].message


def test_the_transposed_einsum_is_invisible_when_d_in_equals_d_out():
    record = attnlab.run("impl_einsum_transposed", overrides=RUN).record
    assert record.status == "ok" and record.findings == []


def test_the_transposed_einsum_fails_clearly_otherwise():
    record = attnlab.run("impl_einsum_transposed", overrides=["inputs=random", "inputs.n_tokens=10",
                                                              "inputs.d_in=24", "d_out=12", "num_heads=4"]).record
    assert record.status == "failed"
    assert "einsum(): subscript d has size 12 for operand 1" in record.error and "\n" not in record.error


@pytest.mark.slow
def test_the_experiment_through_the_cli(app, tmp_path):
    out = tmp_path / "sweep"
    run = app("-m", "+experiment=mha_implementations", "batch=2", "inputs.n_tokens=32", "profile_budget_s=0.2",
              f"hydra.sweep.dir={out}")
    assert run.returncode == 0, run.stderr
    rows = {row["variant"]: row for row in csv.DictReader((out / "comparison.csv").open())}
    assert set(rows) == set(NINE)
    for row in rows.values():
        assert row["status"] == "ok" and float(row["forward_ms"]) > 0 and float(row["forward_ms_vs_reference"]) > 0
        assert float(row["flops"]) > 0
    assert rows["impl_sdpa_mask"]["findings"] != ""  # a mask that hides each query's own and earlier keys
    assert all(rows[n]["findings"] == "" for n in NINE if n != "impl_sdpa_mask")
    assert float(rows["impl_torch_mha"]["flops"]) > float(rows["impl_mha"]["flops"])  # the second projection
    header = next(line for line in run.stdout.splitlines() if line.startswith("variant"))
    assert header.split()[-7:] == ["forward", "ms", "×", "reference", "peak", "MiB", "GFLOPs"]  # cost beside findings
    table = {line.split()[0]: line.split() for line in run.stdout.splitlines() if line.startswith("impl_")}
    assert float(table["impl_torch_mha"][-1]) == pytest.approx(float(rows["impl_torch_mha"]["flops"]) / 1e9, rel=1e-3)
