"""The source's seeded protocol and loading the shared matrices into any layout."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import attnlab
from attnlab.weights import load_shared, manual_seed, projection_role, seeded_qkv


@pytest.mark.parametrize(
    "name,role",
    [("W_query", "queries"), ("W_key", "keys"), ("W_value", "values"), ("W_query.weight", "queries"),
     ("q_proj.weight", "queries"), ("Wk", "keys"), ("W_v", "values"), ("attn.c_attn.weight", None), ("proj", None)],
)
def test_projection_role_is_judged_by_the_parameter_name(name, role):
    assert projection_role(name) == role


def test_seeded_qkv_is_manual_seed_then_three_rand_draws():
    qkv = seeded_qkv(123, 3, 2)
    torch.manual_seed(123)
    assert torch.equal(qkv.W_query, torch.rand(3, 2))
    assert torch.equal(qkv.W_key, torch.rand(3, 2))
    assert torch.equal(qkv.W_value, torch.rand(3, 2))


def test_normal_init_draws_zero_mean_matrices_in_the_same_order():
    qkv = seeded_qkv(123, 64, 8, init="normal")
    torch.manual_seed(123)
    for matrix in (qkv.W_query, qkv.W_key, qkv.W_value):
        assert torch.equal(matrix, torch.randn(64, 8) / 8.0)


def test_linear_weights_receive_the_matrices_transposed():
    module = attnlab.create_variant("linear", 3, 2)
    qkv = seeded_qkv(1, 3, 2)
    report = load_shared(module, qkv)
    assert torch.equal(module.W_key.weight, qkv.W_key.T)
    assert report["W_key.weight"] == "shared (transposed)"


def test_a_square_linear_weight_is_still_transposed():
    module = attnlab.create_variant("linear", 4, 4)
    qkv = seeded_qkv(2, 4, 4)
    load_shared(module, qkv)
    assert torch.equal(module.W_query.weight, qkv.W_query.T)


def test_a_parameter_of_the_wrong_shape_keeps_its_own_values_and_says_so():
    class DInValues(nn.Module):
        def __init__(self):
            super().__init__()
            self.W_query = nn.Parameter(torch.zeros(3, 2))
            self.W_value = nn.Parameter(torch.zeros(3, 3))

    module = DInValues()
    report = load_shared(module, seeded_qkv(1, 3, 2))
    assert report["W_value"] == "native: shape (3, 3) does not fit (3, 2)"
    assert torch.count_nonzero(module.W_value) == 0 and torch.count_nonzero(module.W_query) == 6


def test_a_plugin_loader_wins():
    class OwnLayout(nn.Module):
        def __init__(self):
            super().__init__()
            self.qkv = nn.Parameter(torch.zeros(3, 6))

        def load_qkv(self, W_query, W_key, W_value):
            self.qkv.data = torch.cat([W_query, W_key, W_value], dim=1)

    module = OwnLayout()
    qkv = seeded_qkv(5, 3, 2)
    assert load_shared(module, qkv) == {"load_qkv": "plugin loader"}
    assert torch.equal(module.qkv[:, 2:4], qkv.W_key)


def test_manual_seed_draws_what_torch_manual_seed_draws():
    torch.manual_seed(789)
    expected = torch.rand(3, 2), torch.randn(4)
    manual_seed(789)
    assert torch.equal(torch.rand(3, 2), expected[0]) and torch.equal(torch.randn(4), expected[1])
