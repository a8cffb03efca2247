"""Batched multi-head attention end to end: the source's numbers, correct
implementations of every layout without findings, and the multi-head run a user sees.

Expected values come from the source's own classes (tests/fixtures/source/ch03.py) or from the
book's printed numbers, never from attnlab.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import attnlab
from tests.fixtures.source import SOURCE

IMPLEMENTATIONS = Path(__file__).resolve().parents[1] / "implementations"
BOOK = torch.tensor([[0.43, 0.15, 0.89], [0.55, 0.87, 0.66], [0.57, 0.85, 0.64],
                     [0.22, 0.58, 0.33], [0.77, 0.25, 0.10], [0.05, 0.80, 0.55]])


def test_causal_attention_reproduces_the_published_output():
    result = attnlab.run("causal_attention", seed=123, weights="native")
    published = [[-0.4519, 0.2216], [-0.5874, 0.0058], [-0.6300, -0.0632],
                 [-0.5675, -0.0843], [-0.5526, -0.0981], [-0.5299, -0.1081]]
    output = result.stages["output"]
    assert result.record.variant.shapes["output"] == [2, 6, 2]
    for item in output:  # each batch item, as the source prints it
        np.testing.assert_allclose(item, published, atol=5e-5)


def test_section_3_5_1_causal_weights_with_self_attention_v2_weights():
    result = attnlab.run("causal_attention", seed=789, weights="native")
    np.testing.assert_allclose(result.record.variant.matrix("weights")[1], [0.5517, 0.4483, 0, 0, 0, 0], atol=5e-5)


@pytest.mark.parametrize("name, cls, extra", [
    ("mha_wrapper", "MultiHeadAttentionWrapper", {}),
    ("multi_head_attention", "MultiHeadAttention", {}),
])
def test_wrapper_and_multi_head_attention_reproduce_the_source_classes(ch03, name, cls, extra):
    torch.manual_seed(123)
    source = getattr(ch03, cls)(3, 2, 6, 0.0, num_heads=2).eval()
    with torch.no_grad():
        expected = source(torch.stack((BOOK, BOOK))).numpy()
    result = attnlab.run(name, seed=123, weights="native")
    assert result.record.reference.name == name
    np.testing.assert_allclose(result.stages["output"], expected, atol=1e-6)


CORRECT = ["bonus_pytorch_mha", "einsum_mha", "nanogpt_block", "nn_mha_need_weights", "nn_mha_no_weights",
           "qkvo_proj", "sdpa_bool_mask", "multi_head_attention", "torch_mha", "mha_wrapper", "causal_attention"]
NEEDS_SQUARE = {"nanogpt_block", "nn_mha_need_weights", "nn_mha_no_weights", "torch_mha", "bonus_pytorch_mha"}


@pytest.mark.parametrize("name", CORRECT)
@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(batch=st.integers(1, 3), heads=st.integers(1, 4), tokens=st.integers(1, 24), head_dim=st.integers(1, 8),
       d_in=st.integers(1, 24), seed=st.integers(0, 10_000))
@pytest.mark.slow
def test_correct_implementations_have_no_finding(use_plugins, name, batch, heads, tokens, head_dim, d_in, seed):
    use_plugins(IMPLEMENTATIONS)
    d_out = heads * head_dim
    d_in = d_out if name in NEEDS_SQUARE else d_in
    result = attnlab.run(name, seed=seed, d_out=d_out, num_heads=heads, batch=batch, inputs="random",
                         overrides=[f"inputs.n_tokens={tokens}", f"inputs.d_in={d_in}"])
    record = result.record
    assert record.status == "ok", record.error
    errors = [(f.code, f.stage, f.message) for f in record.findings if f.severity != "info"]
    assert errors == [], (name, record.reference.name)
    assert record.first_divergent_stage is None
    assert record.missing_stages == []


@pytest.mark.slow
def test_the_source_wrapper_pasted_verbatim_runs_against_its_own_reference(tmp_path, use_plugins):
    """Its file defines CausalAttention too: the variant is the outermost class, with no decorator."""
    text = (SOURCE / "ch03.py").read_text()
    pasted = text[text.index("class CausalAttention("):text.index("class MultiHeadAttention(")]
    folder = tmp_path / "plugins"
    folder.mkdir()
    (folder / "pasted_wrapper.py").write_text("import torch\nimport torch.nn as nn\n\n" + pasted)
    use_plugins(folder)
    result = attnlab.run("pasted_wrapper")
    assert result.record.reference.name == "mha_wrapper"
    assert result.record.variant.shapes["weights"] == [2, 2, 6, 6]
    assert result.findings == [] and result.first_divergent_stage is None


def test_stages_carry_axes_module_shapes_and_reconstructed_marks(tmp_path):
    result = attnlab.run("torch_mha", d_out=3, inputs="random", num_heads=3,
                         overrides=["inputs.n_tokens=4", "inputs.d_in=3"], out_dir=tmp_path)
    import json

    data = json.loads((tmp_path / "record.json").read_text())
    assert data["format_version"] == 3
    assert data["stages"]["weights"]["canonical_axes"] == ["batch", "heads", "query", "key"]
    assert data["stages"]["weights"]["shape"] == [2, 3, 4, 4]
    assert "weights" in data["reconstructed_stages"]
    assert result.record.reference.name == "multi_head_attention"


@pytest.mark.slow
def test_a_multi_head_run_in_the_terminal_names_the_reference_and_each_head(app):
    run = app("variant=multi_head_attention", "d_out=4", "show.head=1")
    assert run.returncode == 0, run.stderr
    first = run.stdout.splitlines()[0]
    assert "reference=multi_head_attention" in first and "heads=2" in first
    assert "attention weights (multi_head_attention, head 1, batch item 0)" in run.stdout
    assert "  head 0 " in run.stdout and "  head 1 " in run.stdout
    assert "weights (2, 2, 6, 6)" in run.stdout


@pytest.mark.slow
def test_a_head_past_the_modules_heads_is_a_one_line_error(app):
    run = app("variant=multi_head_attention", "show.head=5")
    assert run.returncode == 2
    assert run.stderr.strip().splitlines() == ["attnlab: error: show.head=5: the module has 2 heads (0 to 1)"]
