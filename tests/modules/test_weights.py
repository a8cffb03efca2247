"""Which projection a parameter is, and the seed every module is built after."""

from __future__ import annotations

import pytest
import torch

from attnlab.modules.roles import manual_seed, projection_role


@pytest.mark.parametrize(
    "name,role",
    [("W_query", "queries"), ("W_key", "keys"), ("W_value", "values"), ("W_query.weight", "queries"),
     ("q_proj.weight", "queries"), ("Wk", "keys"), ("W_v", "values"), ("attn.c_attn.weight", None), ("proj", None)],
)
def test_projection_role_is_judged_by_the_parameter_name(name, role):
    assert projection_role(name) == role


def test_manual_seed_draws_what_torch_manual_seed_draws():
    torch.manual_seed(789)
    expected = torch.rand(3, 2), torch.randn(4)
    manual_seed(789)
    assert torch.equal(torch.rand(3, 2), expected[0]) and torch.equal(torch.randn(4), expected[1])
