"""attnlab.modules.roles: one list of parameter names, read alike by the registry (choosing the
reference), the layouts (moving weights) and the capture (following the output projection)."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from attnlab.capture.recorder import capture
from attnlab.modules.layouts import read_projections
from attnlab.modules.registry import VariantSpec, auto_reference
from attnlab.modules.roles import parameter_role


class _Head(nn.Module):
    def __init__(self, d_in: int, head_dim: int) -> None:
        super().__init__()
        self.W_query = nn.Linear(d_in, head_dim, bias=False)
        self.W_key = nn.Linear(d_in, head_dim, bias=False)
        self.W_value = nn.Linear(d_in, head_dim, bias=False)

    def forward(self, x):
        queries, keys, values = self.W_query(x), self.W_key(x), self.W_value(x)
        return torch.softmax(queries @ keys.mT / keys.shape[-1] ** 0.5, dim=-1) @ values


def _wrapper_with_projection(name: str) -> type[nn.Module]:
    """Per-head modules in an nn.ModuleList, then an output projection called `name`."""

    class Wrapper(nn.Module):
        def __init__(self, d_in, d_out, num_heads):
            super().__init__()
            self.heads = nn.ModuleList(_Head(d_in, d_out // num_heads) for _ in range(num_heads))
            setattr(self, name, nn.Linear(d_out, d_out))

        def forward(self, x):
            return getattr(self, name)(torch.cat([head(x) for head in self.heads], dim=-1))

    return Wrapper


# the names the registry and the layouts disagreed on before they read one list, and the usual ones
@pytest.mark.parametrize("name", ["W_out", "output_proj", "to_out", "out", "out_proj", "o_proj", "c_proj", "dense"])
def test_every_part_of_attnlab_takes_the_same_names_for_an_output_projection(name):
    cls = _wrapper_with_projection(name)
    module = cls(4, 6, 2)
    spec = VariantSpec("wrapper", cls, "", {}, "test")
    assert parameter_role(f"{name}.weight") == "out"
    # the registry: an output projection outside the heads is a multi-head class, not the bare wrapper
    assert auto_reference(spec, module, batched=True) == "multi_head_attention"
    # the layouts: read as the output projection, in x @ W orientation
    W_out = read_projections(module, num_heads=2).W_out
    assert W_out is not None and torch.equal(W_out, getattr(module, name).weight.T)
    # the capture: what the output projection was given is the merged context
    x = torch.rand(2, 5, 4)
    captured = capture(module, x)
    merged = torch.cat([head(x) for head in module.heads], dim=-1)  # (2, 5, 6)
    assert len(captured.out_inputs) == 1 and torch.allclose(captured.out_inputs[0], merged)


def test_a_wrapper_without_an_output_projection_is_the_bare_wrapper():
    cls = _wrapper_with_projection("mix")  # not an output projection's name
    spec = VariantSpec("wrapper", cls, "", {}, "test")
    assert parameter_role("mix.weight") is None
    assert auto_reference(spec, cls(4, 6, 2), batched=True) == "mha_wrapper"


@pytest.mark.parametrize("name,role", [("to_out.0.weight", "out"), ("attn.c_attn.bias", "qkv"),
                                       ("self_attn.in_proj_weight", "qkv"), ("W_out", "out")])
def test_parameter_role_reads_the_last_named_part(name, role):
    assert parameter_role(name) == role
