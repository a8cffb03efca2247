"""Moving a reference's parameters into a variant of any layout: after `align`, the variant's
forward output is the reference's, checked on random batched inputs with the source's classes."""

from __future__ import annotations

import copy
import itertools
import math
from types import ModuleType

import pytest
import torch
import torch.nn.functional as F
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from torch import nn

from attnlab.errors import UserError
from attnlab.modules.layouts import LayoutError, align, load_projections, read_projections, seed_projections
from attnlab.modules.roles import parameter_role
from tests._zoo_helpers import source_qkv


def assert_same_output(reference: nn.Module, variant: nn.Module, x: torch.Tensor) -> None:
    with torch.no_grad():
        expected, actual = reference(x), variant(x)
    torch.testing.assert_close(actual, expected, atol=1e-5, rtol=1e-4)


# --- layouts written here, independently of attnlab ------------------------------------------


class RawTransposed(nn.Module):
    """SelfAttention_v1 with raw (d_out, d_in) parameters used as x @ W.T."""

    def __init__(self, d_in: int, d_out: int):
        super().__init__()
        self.W_query = nn.Parameter(torch.rand(d_out, d_in))
        self.W_key = nn.Parameter(torch.rand(d_out, d_in))
        self.W_value = nn.Parameter(torch.rand(d_out, d_in))

    def forward(self, x):
        queries, keys, values = x @ self.W_query.T, x @ self.W_key.T, x @ self.W_value.T
        return torch.softmax(queries @ keys.T / keys.shape[-1] ** 0.5, dim=-1) @ values


class EinsumMHA(nn.Module):
    """Causal multi-head attention with raw (d_in, d_out) parameters and einsum."""

    def __init__(self, d_in, d_out, context_length, num_heads, qkv_bias=False):
        super().__init__()
        self.num_heads, self.head_dim = num_heads, d_out // num_heads
        self.W_query = nn.Parameter(torch.randn(d_in, d_out))
        self.W_key = nn.Parameter(torch.randn(d_in, d_out))
        self.W_value = nn.Parameter(torch.randn(d_in, d_out))
        self.bias_q = nn.Parameter(torch.randn(d_out)) if qkv_bias else None
        self.bias_k = nn.Parameter(torch.randn(d_out)) if qkv_bias else None
        self.bias_v = nn.Parameter(torch.randn(d_out)) if qkv_bias else None
        self.out_proj = nn.Linear(d_out, d_out)
        self.register_buffer("mask", torch.triu(torch.ones(context_length, context_length), diagonal=1).bool())

    def _heads(self, x, W, b):
        projected = torch.einsum("bnd,do->bno", x, W) + (0 if b is None else b)
        return projected.unflatten(-1, (self.num_heads, self.head_dim))  # (b, n, heads, head_dim)

    def forward(self, x):
        n = x.shape[1]
        Q = self._heads(x, self.W_query, self.bias_q)
        K = self._heads(x, self.W_key, self.bias_k)
        V = self._heads(x, self.W_value, self.bias_v)
        scores = torch.einsum("bnhd,bmhd->bhnm", Q, K) / self.head_dim**0.5
        weights = torch.softmax(scores.masked_fill(self.mask[:n, :n], -torch.inf), dim=-1)
        context = torch.einsum("bhnm,bmhd->bnhd", weights, V)
        return self.out_proj(context.flatten(-2))


class QKVOBlock(nn.Module):
    """Llama-style q_proj/k_proj/v_proj/o_proj, num_kv_heads <= num_heads, SDPA causal."""

    def __init__(self, d_in, d_out, num_heads, num_kv_heads=None, qkv_bias=False):
        super().__init__()
        self.num_heads, self.num_kv_heads = num_heads, num_kv_heads or num_heads
        self.head_dim = d_out // num_heads
        self.q_proj = nn.Linear(d_in, num_heads * self.head_dim, bias=qkv_bias)
        self.k_proj = nn.Linear(d_in, self.num_kv_heads * self.head_dim, bias=qkv_bias)
        self.v_proj = nn.Linear(d_in, self.num_kv_heads * self.head_dim, bias=qkv_bias)
        self.o_proj = nn.Linear(d_out, d_out, bias=False)

    def forward(self, x):
        b, n, _ = x.shape
        q = self.q_proj(x).view(b, n, self.num_heads, self.head_dim).transpose(1, 2)
        k = self.k_proj(x).view(b, n, self.num_kv_heads, self.head_dim).transpose(1, 2)
        v = self.v_proj(x).view(b, n, self.num_kv_heads, self.head_dim).transpose(1, 2)
        group = self.num_heads // self.num_kv_heads
        k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
        context = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.o_proj(context.transpose(1, 2).reshape(b, n, -1))


class TorchMHA(nn.Module):
    """nn.MultiheadAttention(batch_first=True) as a submodule, with a causal mask."""

    def __init__(self, d, num_heads, bias=True):
        super().__init__()
        self.attn = nn.MultiheadAttention(d, num_heads, bias=bias, batch_first=True)

    def forward(self, x):
        n = x.shape[1]
        mask = torch.triu(torch.ones(n, n, dtype=torch.bool), diagonal=1)
        return self.attn(x, x, x, attn_mask=mask, need_weights=False)[0]


class NanoGPTAttention(nn.Module):
    """nanoGPT's CausalSelfAttention: fused c_attn, c_proj, flash path."""

    def __init__(self, d, num_heads, bias=True):
        super().__init__()
        self.num_heads = num_heads
        self.c_attn = nn.Linear(d, 3 * d, bias=bias)
        self.c_proj = nn.Linear(d, d, bias=bias)

    def forward(self, x):
        b, n, d = x.shape
        q, k, v = self.c_attn(x).split(d, dim=2)
        q, k, v = (t.view(b, n, self.num_heads, d // self.num_heads).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.c_proj(y.transpose(1, 2).contiguous().view(b, n, d))


# --- single-head layouts against SelfAttention_v1 ---------------------------------------------


@settings(max_examples=25, deadline=None)
@given(d_in=st.integers(1, 9), d_out=st.integers(1, 9), n=st.integers(1, 8), seed=st.integers(0, 2**16))
def test_raw_transposed_parameters_take_v1_transposed(ch03, d_in, d_out, n, seed):
    assume(d_in != d_out)  # a square raw matrix is taken as x @ W: its orientation cannot be told from its shape
    torch.manual_seed(seed)
    reference, variant = ch03.SelfAttention_v1(d_in, d_out), RawTransposed(d_in, d_out)
    report = align(reference, variant, num_heads=1)
    assert report["W_query"] == "shared (transposed)"
    assert_same_output(reference, variant, torch.rand(n, d_in))


@settings(max_examples=25, deadline=None)
@given(d_in=st.integers(1, 9), d_out=st.integers(1, 9), n=st.integers(1, 8), qkv_bias=st.booleans())
def test_linear_layers_take_v1_transposed_and_a_missing_bias_is_zeroed(ch03, d_in, d_out, n, qkv_bias):
    reference, variant = ch03.SelfAttention_v1(d_in, d_out), ch03.SelfAttention_v2(d_in, d_out, qkv_bias=qkv_bias)
    report = align(reference, variant, num_heads=1)
    assert report["W_key.weight"] == "shared (transposed)"
    assert_same_output(reference, variant, torch.rand(n, d_in))


def test_v2_with_bias_aligned_to_v1_gives_v1s_output_bias_zeroed_and_reported(ch03):
    torch.manual_seed(123)
    reference, variant = ch03.SelfAttention_v1(3, 2), ch03.SelfAttention_v2(3, 2, qkv_bias=True)
    x = torch.rand(6, 3)
    with torch.no_grad():
        assert not torch.allclose(variant(x), reference(x))
    report = align(reference, variant, num_heads=1)
    for role in ("W_query", "W_key", "W_value"):
        assert report[f"{role}.bias"] == "zeroed (the reference has no bias)"
        assert torch.count_nonzero(getattr(variant, role).bias) == 0
    assert_same_output(reference, variant, x)


def test_a_reference_bias_the_variant_cannot_hold_is_zeroed_in_the_reference(ch03):
    torch.manual_seed(5)
    reference, variant = ch03.SelfAttention_v2(4, 3, qkv_bias=True), ch03.SelfAttention_v1(4, 3)
    report = align(reference, variant, num_heads=1)
    assert report["reference.W_value.bias"] == "zeroed (the variant has no bias)"
    assert torch.count_nonzero(reference.W_value.bias) == 0
    assert_same_output(reference, variant, torch.rand(5, 4))


def test_a_d_in_sized_projection_keeps_its_own_values_and_the_report_says_so(ch03):
    class DInValues(ch03.SelfAttention_v1):
        def __init__(self, d_in, d_out):
            super().__init__(d_in, d_out)
            self.W_value = nn.Parameter(torch.rand(d_in, d_in))

    torch.manual_seed(1)
    reference, variant = ch03.SelfAttention_v1(3, 2), DInValues(3, 2)
    own = variant.W_value.detach().clone()
    report = align(reference, variant, num_heads=1)
    assert report["W_value"] == "native: shape (3, 3) does not fit (3, 2)"
    assert torch.equal(variant.W_value, own)
    assert torch.equal(variant.W_query, reference.W_query)


# --- multi-head layouts against the source's MultiHeadAttention -------------------------------


def _build(kind: str, ch03: ModuleType, mha_impls: ModuleType, d_in: int, heads: int, hd: int, bias: bool) -> nn.Module:
    d_out, ctx = heads * hd, 64
    return {
        "source_mha": lambda: ch03.MultiHeadAttention(d_in, d_out, ctx, 0.0, heads, qkv_bias=bias),
        "pytorch_mha_fused": lambda: ch03.PyTorchMultiHeadAttention(d_in, d_out, heads, qkv_bias=bias),
        "einsum": lambda: EinsumMHA(d_in, d_out, ctx, heads, qkv_bias=bias),
        "qkvo": lambda: QKVOBlock(d_in, d_out, heads, qkv_bias=bias),
        "torch_mha": lambda: TorchMHA(d_out, heads, bias=bias),
        "nanogpt": lambda: NanoGPTAttention(d_out, heads, bias=bias),
        "combined_qkv": lambda: mha_impls.MultiHeadAttentionCombinedQKV(d_in, d_out, heads, ctx, qkv_bias=bias),
        "mha_pytorch_class": lambda: mha_impls.MHAPyTorchClass(d_in, d_out, heads, ctx, qkv_bias=False),
    }[kind]()


SQUARE_ONLY = {"torch_mha", "nanogpt", "combined_qkv", "mha_pytorch_class"}  # these need d_in == d_out
PAIR_KINDS = ["source_mha", "pytorch_mha_fused", "einsum", "qkvo", "torch_mha"]


@pytest.mark.parametrize("reference_kind,variant_kind", list(itertools.permutations(PAIR_KINDS, 2)))
@settings(max_examples=6, deadline=None)
@given(batch=st.integers(1, 3), heads=st.integers(1, 4), hd=st.integers(1, 6), n=st.integers(1, 12),
       d_in=st.integers(1, 10), bias=st.booleans(), seed=st.integers(0, 2**16))
def test_every_pair_gives_the_same_output_after_align(ch03, mha_impls, reference_kind, variant_kind,
                                                      batch, heads, hd, n, d_in, bias, seed):
    if {reference_kind, variant_kind} & SQUARE_ONLY:
        d_in = heads * hd
    torch.manual_seed(seed)
    reference = _build(reference_kind, ch03, mha_impls, d_in, heads, hd, bias)
    variant = _build(variant_kind, ch03, mha_impls, d_in, heads, hd, bias)
    align(reference, variant, num_heads=heads)
    assert_same_output(reference, variant, torch.randn(batch, n, d_in))


@pytest.mark.parametrize("variant_kind", ["nanogpt", "combined_qkv", "mha_pytorch_class", "pytorch_mha_fused",
                                          "einsum", "qkvo", "torch_mha"])
@settings(max_examples=8, deadline=None)
@given(batch=st.integers(1, 3), heads=st.integers(1, 4), hd=st.integers(1, 6), n=st.integers(1, 12),
       bias=st.booleans(), seed=st.integers(0, 2**16))
def test_each_layout_gives_the_source_mha_output(ch03, mha_impls, variant_kind, batch, heads, hd, n, bias, seed):
    d = heads * hd
    torch.manual_seed(seed)
    reference = ch03.MultiHeadAttention(d, d, 64, 0.0, heads, qkv_bias=bias)
    variant = _build(variant_kind, ch03, mha_impls, d, heads, hd, bias)
    align(reference, variant, num_heads=heads)
    assert_same_output(reference, variant, torch.randn(batch, n, d))


class TorchMHAThenProj(TorchMHA):
    """Two output projections in a row, both with a bias: nn.MultiheadAttention's out_proj, then proj."""

    def __init__(self, d, num_heads):
        super().__init__(d, num_heads)
        self.proj = nn.Linear(d, d)

    def forward(self, x):
        return self.proj(super().forward(x))


@settings(max_examples=10, deadline=None)
@given(heads=st.integers(1, 3), hd=st.integers(1, 4), n=st.integers(1, 8), seed=st.integers(0, 2**16))
def test_output_projections_in_a_row_compose_when_read_and_split_when_loaded(ch03, mha_impls, heads, hd, n, seed):
    d = heads * hd
    torch.manual_seed(seed)
    two_projections, source_mha = TorchMHAThenProj(d, heads), ch03.MultiHeadAttention(d, d, 16, 0.0, heads)
    x = torch.randn(2, n, d)
    align(two_projections, source_mha, num_heads=heads)
    assert_same_output(two_projections, source_mha, x)

    torch.manual_seed(seed + 1)
    source_mha = ch03.MultiHeadAttention(d, d, 16, 0.0, heads)
    report = align(source_mha, two_projections, num_heads=heads)
    assert report["attn.out_proj.bias"] == "shared"
    assert report["proj.weight"] == "identity (an output projection after the first)"
    assert report["proj.bias"] == "zeroed (an output projection after the first)"
    assert_same_output(source_mha, two_projections, x)

    torch.manual_seed(seed + 2)
    pytorch_class = mha_impls.MHAPyTorchClass(d, d, heads, 16)
    align(pytorch_class, source_mha, num_heads=heads)
    assert_same_output(pytorch_class, source_mha, x)


def test_fused_qkv_is_split_by_position_and_reported(ch03):
    torch.manual_seed(3)
    reference, variant = ch03.MultiHeadAttention(6, 6, 8, 0.0, 2, qkv_bias=True), NanoGPTAttention(6, 2)
    report = align(reference, variant, num_heads=2)
    assert report["c_attn.weight"] == "shared (transposed, fused qkv, rows 0:6 = queries, 6:12 = keys, 12:18 = values)"
    assert report["c_attn.bias"] == "shared (fused qkv, entries 0:6 = queries, 6:12 = keys, 12:18 = values)"
    assert torch.equal(variant.c_attn.weight[6:12], reference.W_key.weight)
    assert torch.equal(variant.c_attn.bias[12:18], reference.W_value.bias)


def test_torch_mha_in_proj_and_out_proj_are_read_transposed():
    torch.manual_seed(0)
    module = TorchMHA(6, 3)
    projections = read_projections(module, num_heads=3)
    assert torch.equal(projections.W_key, module.attn.in_proj_weight[6:12].T)
    assert torch.equal(projections.b_value, module.attn.in_proj_bias[12:18])
    assert torch.equal(projections.W_out, module.attn.out_proj.weight.T)
    assert (projections.num_heads, projections.num_kv_heads, projections.head_dim) == (3, 3, 2)


def test_torch_mha_with_separate_key_and_value_dims_round_trips_through_projections():
    torch.manual_seed(0)
    source, target = (nn.MultiheadAttention(6, 2, kdim=4, vdim=4, batch_first=True) for _ in range(2))
    projections = read_projections(source, num_heads=2)
    assert torch.equal(projections.W_key, source.k_proj_weight.T)  # (kdim, d_out)
    report = load_projections(target, projections, num_heads=2)
    assert report["q_proj_weight"] == "shared (transposed)"
    query, memory = torch.randn(2, 5, 6), torch.randn(2, 7, 4)
    with torch.no_grad():
        torch.testing.assert_close(target(query, memory, memory)[0], source(query, memory, memory)[0])


@settings(max_examples=10, deadline=None)
@given(batch=st.integers(1, 3), heads=st.integers(1, 4), hd=st.integers(1, 5), n=st.integers(1, 10),
       d_in=st.integers(1, 8), seed=st.integers(0, 2**16))
def test_per_head_modules_take_their_heads_columns_and_back(ch03, batch, heads, hd, n, d_in, seed):
    torch.manual_seed(seed)
    mha = ch03.MultiHeadAttention(d_in, heads * hd, 16, 0.0, heads)
    wrapper = ch03.MultiHeadAttentionWrapper(d_in, hd, 16, 0.0, heads)
    report = align(mha, wrapper, num_heads=heads)  # the wrapper has no out_proj: identity in the reference
    assert report["reference.out_proj.weight"] == "identity (the variant has no output projection)"
    assert report["reference.out_proj.bias"] == "zeroed (the variant has no bias)"
    last = heads - 1
    expected = f"shared (transposed, head {last} = columns {last * hd}:{heads * hd})"
    assert report[f"heads.{last}.W_key.weight"] == expected
    assert torch.equal(wrapper.heads[last].W_key.weight, mha.W_key.weight[last * hd :])
    x = torch.randn(batch, n, d_in)
    assert_same_output(mha, wrapper, x)

    torch.manual_seed(seed + 1)
    mha = ch03.MultiHeadAttention(d_in, heads * hd, 16, 0.0, heads)
    report = align(wrapper, mha, num_heads=heads)
    assert report["out_proj.weight"] == "identity (the reference has no output projection)"
    assert_same_output(wrapper, mha, x)


@pytest.mark.parametrize("heads,kv_heads", [(4, 2), (4, 1), (6, 3), (2, 2)])
def test_fewer_kv_heads_take_the_columns_of_query_head_g_times_group(ch03, heads, kv_heads):
    hd, d_in, group = 3, 5, heads // kv_heads
    torch.manual_seed(11)
    reference = ch03.MultiHeadAttention(d_in, heads * hd, 16, 0.0, heads, qkv_bias=True)
    original_keys = reference.W_key.weight.detach().clone()  # (heads * hd, d_in)
    variant = QKVOBlock(d_in, heads * hd, heads, kv_heads, qkv_bias=True)
    report = align(reference, variant, num_heads=heads, num_kv_heads=kv_heads)
    for g in range(kv_heads):
        h = g * group
        assert torch.equal(variant.k_proj.weight[g * hd : (g + 1) * hd], original_keys[h * hd : (h + 1) * hd])
    assert torch.equal(reference.W_key.weight, original_keys)  # the reference keeps its own heads
    assert "reference.W_key.weight" not in report
    if kv_heads < heads:
        kept = ", ".join(str(g * group) for g in range(kv_heads))
        assert report["key/value heads"] == f"the reference's heads {kept} of {heads} (the first of each group of {group})"
    assert report["reference.out_proj.bias"] == "zeroed (the variant has no bias)"  # o_proj has none
    grouped = copy.deepcopy(reference)  # the reference with each group's first key/value head repeated
    with torch.no_grad():
        for layer in (grouped.W_key, grouped.W_value):
            for h in range(heads):
                first = (h // group) * group
                layer.weight[h * hd : (h + 1) * hd] = layer.weight[first * hd : (first + 1) * hd].clone()
                layer.bias[h * hd : (h + 1) * hd] = layer.bias[first * hd : (first + 1) * hd].clone()
    assert_same_output(grouped, variant, torch.randn(2, 7, d_in))


def test_a_d_in_sized_key_in_a_multi_head_variant_is_not_taken_for_fewer_kv_heads(ch03):
    torch.manual_seed(2)
    reference, variant = ch03.MultiHeadAttention(4, 8, 16, 0.0, 4), QKVOBlock(4, 8, 4)
    variant.k_proj = nn.Linear(4, 4, bias=False)  # (d_in, d_in): as wide as 2 kv heads would be
    own = variant.k_proj.weight.detach().clone()
    report = align(reference, variant, num_heads=4)
    assert report["k_proj.weight"] == "native: shape (4, 4) does not fit (8, 4)"
    assert torch.equal(variant.k_proj.weight, own)
    assert not any(name.startswith("reference.W_key") for name in report)


# --- parameters only ---------------------------------------------------------------------------


def test_buffers_stay_their_own_and_no_state_dict_is_loaded(ch03, monkeypatch):
    monkeypatch.setattr(nn.Module, "load_state_dict", lambda *a, **k: pytest.fail("state_dict loaded wholesale"))
    torch.manual_seed(4)
    reference = ch03.MultiHeadAttention(4, 4, 6, 0.0, 2)
    variant = ch03.MultiHeadAttention(4, 4, 6, 0.0, 2)
    variant.mask.zero_()  # a mask bug the comparison must see
    align(reference, variant, num_heads=2)
    assert torch.count_nonzero(variant.mask) == 0
    assert torch.count_nonzero(reference.mask) == 15


def test_a_module_without_query_key_value_parameters_is_a_one_line_user_error():
    class Opaque(nn.Module):
        def __init__(self):
            super().__init__()
            self.a = nn.Parameter(torch.rand(3, 2))
            self.b = nn.Linear(3, 2)

    with pytest.raises(LayoutError) as raised:
        read_projections(Opaque(), num_heads=1)
    message = str(raised.value)
    assert isinstance(raised.value, UserError) and "\n" not in message
    assert "a (3, 2)" in message and "b.weight (2, 3)" in message and "weights=native" in message


# --- roles and seeding -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name,role",
    [("W_query", "queries"), ("heads.1.W_key.weight", "keys"), ("bias_v", "values"), ("q_proj.weight", "queries"),
     ("attn.c_attn.weight", "qkv"), ("qkv.bias", "qkv"), ("self_attn.in_proj_weight", "qkv"),
     ("k_proj_weight", "keys"), ("out_proj.weight", "out"), ("o_proj.weight", "out"), ("c_proj.bias", "out"),
     ("proj.weight", "out"), ("mask", None), ("norm.weight", None)],
)
def test_parameter_role_by_name(name, role):
    assert parameter_role(name) == role


def test_v1_built_after_manual_seed_reads_as_todays_three_rand_draws(ch03):
    torch.manual_seed(123)
    projections = read_projections(ch03.SelfAttention_v1(3, 2), num_heads=1)
    W_query, W_key, W_value = source_qkv(123, 3, 2)
    assert torch.equal(projections.W_query, W_query)
    assert torch.equal(projections.W_key, W_key)
    assert torch.equal(projections.W_value, W_value)
    assert projections.b_query is None and projections.W_out is None


def test_seed_projections_rand_keeps_the_references_own_init(ch03):
    torch.manual_seed(7)
    reference = ch03.SelfAttention_v2(3, 2)
    before = reference.W_query.weight.detach().clone()
    assert seed_projections(reference, 7, "rand") == {}
    assert torch.equal(reference.W_query.weight, before)


@pytest.mark.parametrize("layout", ["raw", "linear", "fused"])
def test_seed_projections_normal_redraws_query_key_value_in_order(ch03, layout):
    d_in, d_out = 16, 4
    reference = {
        "raw": lambda: ch03.SelfAttention_v1(d_in, d_out),
        "linear": lambda: ch03.SelfAttention_v2(d_in, d_out),
        "fused": lambda: ch03.PyTorchMultiHeadAttention(d_in, d_out, 2),
    }[layout]()
    seed_projections(reference, 9, "normal", num_heads=2)
    projections = read_projections(reference, num_heads=2)
    expected = dict(zip(("W_query", "W_key", "W_value"), source_qkv(9, d_in, d_out, init="normal")))
    for field in ("W_query", "W_key", "W_value"):
        torch.testing.assert_close(getattr(projections, field), expected[field], rtol=0, atol=0)
    assert math.isclose(float(expected["W_query"].std()), 1 / d_in**0.5, rel_tol=0.5)


def test_a_plugin_with_a_layout_of_its_own_loads_the_matrices_itself():
    class OwnLayout(nn.Module):
        def __init__(self):
            super().__init__()
            self.qkv = nn.Parameter(torch.zeros(3, 6))

        def load_qkv(self, W_query, W_key, W_value):
            self.qkv.data = torch.cat([W_query, W_key, W_value], dim=1)

    torch.manual_seed(5)
    reference = nn.Module()
    for name in ("W_query", "W_key", "W_value"):
        setattr(reference, name, nn.Parameter(torch.rand(3, 2)))
    variant = OwnLayout()
    assert align(reference, variant, num_heads=1) == {"load_qkv": "plugin loader"}
    assert torch.equal(variant.qkv[:, 2:4], reference.W_key)
