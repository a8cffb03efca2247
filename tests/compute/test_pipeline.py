"""The numbers: the source's published values, and variants against independent computations."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

import attnlab
from attnlab.errors import UserError

BOOK_CONTEXT_SEED_123 = [
    [0.2996, 0.8053], [0.3061, 0.8210], [0.3058, 0.8203],
    [0.2948, 0.7939], [0.2927, 0.7891], [0.2990, 0.8040],
]
BOOK_LINEAR_NATIVE_SEED_789 = [
    [-0.0739, 0.0713], [-0.0748, 0.0703], [-0.0749, 0.0702],
    [-0.0760, 0.0685], [-0.0763, 0.0679], [-0.0754, 0.0693],
]


def test_reference_reproduces_the_published_context_vectors():
    result = attnlab.run("reference", seed=123)
    record = result.record
    assert record.reference.name == "reference" and record.variant.shapes["context"] == [6, 2]
    assert result.stages["context"].shape == (6, 2) and result.stages["output"].shape == (6, 2)
    assert record.variant.canonical("context").shape == (1, 1, 6, 2) and record.variant.canonical("output").shape == (1, 6, 2)
    np.testing.assert_allclose(record.variant.matrix("context"), BOOK_CONTEXT_SEED_123, atol=5e-5)
    assert record.output_is_context
    np.testing.assert_allclose(record.variant.matrix("output"), BOOK_CONTEXT_SEED_123, atol=5e-5)
    assert result.record.labels == ["Your", "journey", "starts", "with", "one", "step"]


def test_linear_with_native_weights_reproduces_the_published_values():
    result = attnlab.run("linear", seed=789, weights="native")
    assert result.record.variant.shapes["output"] == [6, 2]
    np.testing.assert_allclose(result.record.variant.matrix("context"), BOOK_LINEAR_NATIVE_SEED_789, atol=5e-5)
    np.testing.assert_allclose(result.record.variant.matrix("output"), BOOK_LINEAR_NATIVE_SEED_789, atol=5e-5)


def test_linear_with_shared_weights_equals_the_reference():
    result = attnlab.run("linear", seed=123)
    np.testing.assert_allclose(result.stages["context"], result.reference_stages["context"], atol=1e-6)
    assert result.record.weights_loaded == {"W_query.weight": "shared (transposed)", "W_key.weight": "shared (transposed)", "W_value.weight": "shared (transposed)"}


def _independent_qkv(x: torch.Tensor, seed: int, d_out: int) -> tuple[torch.Tensor, ...]:
    """The source's protocol written out: manual_seed, then three torch.rand draws."""
    torch.manual_seed(seed)
    W_query, W_key, W_value = (torch.rand(x.shape[1], d_out) for _ in range(3))
    return x @ W_query, x @ W_key, x @ W_value


shapes = dict(
    seed=st.integers(0, 2**16),
    n_tokens=st.integers(1, 24),
    d_in=st.integers(1, 16),
    d_out=st.integers(1, 16),
    distribution=st.sampled_from(["uniform", "normal"]),
)


def _random_run(variant: str, seed: int, n_tokens: int, d_in: int, d_out: int, distribution: str):
    result = attnlab.run(
        variant, seed=seed, d_out=d_out, inputs="random",
        overrides=[f"inputs.n_tokens={n_tokens}", f"inputs.d_in={d_in}", f"inputs.distribution={distribution}"],
    )
    assert result.record.variant.shapes["inputs"] == [n_tokens, d_in]  # a 2-D module gets (n_tokens, d_in)
    assert result.record.variant.shapes["output"] == [n_tokens, d_out]
    x = torch.from_numpy(result.record.variant.matrix("inputs"))
    assert x.shape == (n_tokens, d_in)
    return result, _independent_qkv(x, seed, d_out)


@settings(max_examples=15, deadline=None)
@given(**shapes)
@pytest.mark.slow
def test_reference_equals_scaled_dot_product_attention(seed, n_tokens, d_in, d_out, distribution):
    result, (q, k, v) = _random_run("reference", seed, n_tokens, d_in, d_out, distribution)
    expected = F.scaled_dot_product_attention(q[None], k[None], v[None])[0]
    np.testing.assert_allclose(result.record.variant.matrix("context"), expected.numpy(), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(result.record.variant.matrix("output"), expected.numpy(), rtol=1e-5, atol=1e-5)


@settings(max_examples=15, deadline=None)
@given(**shapes)
@pytest.mark.slow
def test_unscaled_equals_sdpa_with_scale_one(seed, n_tokens, d_in, d_out, distribution):
    result, (q, k, v) = _random_run("unscaled", seed, n_tokens, d_in, d_out, distribution)
    expected = F.scaled_dot_product_attention(q[None], k[None], v[None], scale=1.0)[0]
    np.testing.assert_allclose(result.record.variant.matrix("context"), expected.numpy(), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(result.record.variant.matrix("output"), expected.numpy(), rtol=1e-5, atol=1e-5)


@settings(max_examples=15, deadline=None)
@given(**shapes)
@pytest.mark.slow
def test_wrong_softmax_axis_equals_an_independent_softmax_over_dim_0(seed, n_tokens, d_in, d_out, distribution):
    result, (q, k, v) = _random_run("wrong_softmax_axis", seed, n_tokens, d_in, d_out, distribution)
    scaled = (q @ k.T).double() / d_out**0.5
    weights = torch.exp(scaled - scaled.max(dim=0).values) / torch.exp(scaled - scaled.max(dim=0).values).sum(dim=0)
    np.testing.assert_allclose(result.record.variant.matrix("context"), (weights @ v.double()).numpy(), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(result.record.variant.matrix("output"), (weights @ v.double()).numpy(), rtol=1e-5, atol=1e-5)


@pytest.mark.slow
def test_a_plugin_that_raises_fails_its_own_record_only(plugin_folder, use_plugins):
    folder = plugin_folder("raises_in_forward", """
        import torch.nn as nn
        class Broken(nn.Module):
            def __init__(self, d_in, d_out):
                super().__init__()
            def forward(self, x):
                raise RuntimeError("boom")
    """)
    use_plugins(folder)
    result = attnlab.run("raises_in_forward", weights="native")  # no parameters to share: weights=native
    assert result.record.status == "failed"
    assert result.record.error == "variant 'raises_in_forward' raised RuntimeError: boom"
    assert attnlab.run("unscaled").record.status == "ok"


@pytest.mark.slow
def test_a_plugin_returning_the_wrong_rows_fails_with_the_shape_named(plugin_folder, use_plugins):
    folder = plugin_folder("one_row", """
        import torch, torch.nn as nn
        class OneRow(nn.Module):
            def __init__(self, d_in, d_out):
                super().__init__()
            def forward(self, x):
                return x.sum(dim=0, keepdim=True)
    """)
    use_plugins(folder)
    record = attnlab.run("one_row", weights="native").record  # no parameters to share: weights=native
    assert record.status == "failed"
    assert record.error == ("variant 'one_row' returned (1, 3), not a tensor of shape (n_tokens, ·) or "
                            "(batch, n_tokens, ·); return the context vectors")


_SELF_ATTENTION_RETURNING = """
    import torch, torch.nn as nn
    class SelfAttentionReturning(nn.Module):
        def __init__(self, d_in, d_out):
            super().__init__()
            self.W_query = nn.Parameter(torch.rand(d_in, d_out))
            self.W_key = nn.Parameter(torch.rand(d_in, d_out))
            self.W_value = nn.Parameter(torch.rand(d_in, d_out))
        def forward(self, x):
            keys = x @ self.W_key
            queries = x @ self.W_query
            values = x @ self.W_value
            attn_scores = queries @ keys.T
            attn_weights = torch.softmax(attn_scores / keys.shape[-1]**0.5, dim=-1)
            return RETURNED
"""


def _returning(plugin_folder, use_plugins, name: str, returned: str):
    use_plugins(plugin_folder(name, _SELF_ATTENTION_RETURNING.replace("RETURNED", returned)))
    return attnlab.run(name).record


@pytest.mark.slow
def test_a_plugin_returning_the_weights_gets_wrong_output_naming_them(plugin_folder, use_plugins):
    """`return attn_weights` is a finding at the output, naming the weights."""
    record = _returning(plugin_folder, use_plugins, "returns_weights", "attn_weights")
    assert record.status == "ok" and record.variant.shapes["output"] == [6, 6]
    assert record.expected_shapes["output"] == [6, 2]
    assert ("wrong_output", "output") in [(f.code, f.stage) for f in record.findings]
    [finding] = [f for f in record.findings if f.code == "wrong_output"]
    assert finding.severity == "error"
    assert "(6, 6)" in finding.message and "(6, 2)" in finding.message
    assert "attention weights (attn_weights)" in finding.message
    np.testing.assert_array_equal(record.variant.matrix("output"), record.variant.matrix("weights"))


@pytest.mark.slow
def test_a_plugin_returning_weights_times_x_gets_no_value_path_finding(plugin_folder, use_plugins):
    """A (6, 3) `attn_weights @ x` must not be blamed on the values line."""
    record = _returning(plugin_folder, use_plugins, "returns_weights_x", "attn_weights @ x")
    assert record.status == "ok" and record.variant.shapes["output"] == [6, 3]
    assert [f for f in record.findings if f.severity == "error"], "a wrong output is always a finding"
    assert "value_path" not in {f.code for f in record.findings}, record.findings


@pytest.mark.parametrize("variant,kept,group", [("multi_head_attention", None, 1), ("gqa", "0, 2", 2), ("mqa", "0", 4)])
def test_num_kv_heads_regroups_only_a_module_that_takes_or_declares_it(variant, kept, group):
    """The top-level num_kv_heads=2 reaches gqa's constructor; multi_head_attention takes no such
    argument (its keys stay its own: no finding), and mqa declares its one kv head itself."""
    record = attnlab.run(variant, seed=3, overrides=["inputs=random", "inputs.n_tokens=6", "inputs.d_in=8"],
                         d_out=8, num_heads=4, num_kv_heads=2, reference="multi_head_attention").record
    assert record.weights_loaded.get("key/value heads") == (
        None if kept is None else f"the reference's heads {kept} of 4 (the first of each group of {group})")
    assert [f.code for f in record.findings] == ([] if kept is None else ["kv_heads"])


def test_reference_params_reach_the_reference_auto_chooses():
    """reference.params with reference=auto: given to the chosen reference, not dropped. An
    argument its constructor does not take is refused naming it, where it used to be ignored."""
    with pytest.raises(UserError, match="'reference' takes no parameter 'no_such_argument'"):
        attnlab.run("unscaled", overrides=["+reference.params.no_such_argument=1"])


class _OpaqueKernelAttention(torch.nn.Module):
    """Attention through a kernel torch does not see (its scores made in numpy, as a compiled kernel's
    would be), with projections one column wider than the reference's, so none of its weights fits."""

    def __init__(self, d_in: int, d_out: int) -> None:
        super().__init__()
        self.W_query = torch.nn.Parameter(torch.rand(d_in, d_out + 1))
        self.W_key = torch.nn.Parameter(torch.rand(d_in, d_out + 1))
        self.W_value = torch.nn.Parameter(torch.rand(d_in, d_out + 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        queries = (x @ self.W_query).detach().numpy()  # (b, num_tokens, d_out + 1)
        keys = (x @ self.W_key).detach().numpy()  # (b, num_tokens, d_out + 1)
        attn_scores = torch.from_numpy(queries @ keys.swapaxes(-2, -1))  # (b, num_tokens, num_tokens)
        attn_weights = torch.softmax(attn_scores / keys.shape[-1] ** 0.5, dim=-1)
        return attn_weights @ (x @ self.W_value)  # (b, num_tokens, d_out + 1)


def test_a_variant_of_which_nothing_can_be_compared_is_refused_naming_its_parameters():
    result = attnlab.run(_OpaqueKernelAttention)
    assert result.record.status == "failed", [f.code for f in result.findings]
    assert "nothing of" in result.record.error and "can be compared" in result.record.error, result.record.error
    assert "W_query shape (3, 3) does not fit (3, 2)" in result.record.error, result.record.error
