"""attnlab.modules.roles: one list of parameter names, read alike by the registry (choosing the
reference), the layouts (moving weights) and the capture (following the output projection)."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import attnlab
from attnlab.capture.recorder import capture
from attnlab.modules.layouts import read_projections
from attnlab.modules.registry import VariantSpec, auto_reference
from attnlab.modules.roles import FusedLayout, module_roles, parameter_role
from tests.modules.hf_runs import SIZES, assert_runs_clean, errors, softmax_over_queries


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


@pytest.mark.parametrize("order, heads, kv_heads", [("qkv", 4, 4), ("qkv", 4, 1), ("per_head", 4, 4)])
def test_a_fused_layout_splits_what_it_joins_and_names_each_column(order, heads, kv_heads):
    """Against torch's own views: [q | k | v] blocks by torch.split, per head by a (heads, 3, hd) view."""
    hd = 3
    layout = FusedLayout(order, heads, kv_heads)
    q, k, v = torch.randn(2, heads * hd), torch.randn(2, kv_heads * hd), torch.randn(2, kv_heads * hd)
    fused = layout.join([q, k, v])  # (2, (heads + 2 * kv_heads) * hd)
    if order == "per_head":
        expected = torch.stack([t.view(2, heads, hd) for t in (q, k, v)], dim=2).flatten(1)  # (2, heads * 3 * hd)
    else:
        expected = torch.cat([q, k, v], dim=-1)
    assert torch.equal(fused, expected)
    assert all(torch.equal(a, b) for a, b in zip(layout.split(fused), (q, k, v)))
    roles = layout.column_roles(fused.shape[-1])
    assert [int((roles == i).sum()) for i in range(3)] == [heads * hd, kv_heads * hd, kv_heads * hd]
    assert torch.equal(layout.join([torch.full_like(t, i) for i, t in enumerate((q, k, v))])[0].long(), roles)


def test_a_width_the_declared_heads_do_not_split_is_read_as_equal_thirds():
    assert FusedLayout("qkv", 4, 4).column_roles(9).tolist() == [0, 0, 0, 1, 1, 1, 2, 2, 2]
    assert FusedLayout("qkv", 1, 1).column_roles(10) is None


def test_codegens_fused_qkv_is_read_in_its_mp_num_groups_as_its_forward_splits_them():
    """Against CodeGen's own view: qkv.view(..., mp_num, 3 * local_dim).split(local_dim) is query, value, key."""
    pytest.importorskip("transformers")
    from transformers import CodeGenConfig
    from transformers.models.codegen.modeling_codegen import CodeGenAttention

    from attnlab.modules.roles import fused_layout

    module = CodeGenAttention(CodeGenConfig(n_embd=64, n_head=4, rotary_dim=8), 0)
    fused = module.qkv_proj.weight.detach().T  # (d_in, 3 * d_out), x @ W
    query, value, key = fused.view(64, module.mp_num, -1).split(64 // module.mp_num, dim=-1)  # (d_in, 4, 16) each
    layout = fused_layout(module, "qkv_proj.weight")
    assert layout.order == "grouped" and layout.groups == 4
    split = layout.split(fused)
    assert all(torch.equal(a, b.flatten(1)) for a, b in zip(split, (query, key, value)))
    assert torch.equal(layout.join(split), fused)


def test_falcons_new_decoder_architecture_is_read_per_key_value_group_as_its_forward_views_it():
    """Against Falcon's own view: (num_kv_heads, group + 2, head_dim), each group's queries, then its key and value."""
    pytest.importorskip("transformers")
    from transformers import FalconConfig
    from transformers.models.falcon.modeling_falcon import FalconAttention

    from attnlab.modules.roles import fused_layout

    config = FalconConfig(hidden_size=64, num_attention_heads=4, num_kv_heads=2, new_decoder_architecture=True)
    module = FalconAttention(config, 0)
    fused = module.query_key_value.weight.detach().T  # (d_in, (4 + 2 * 2) * 16)
    grouped = fused.view(64, 2, -1, 16)  # (d_in, n_kv, group + 2, hd)
    expected = (grouped[:, :, :-2].flatten(1), grouped[:, :, -2].flatten(1), grouped[:, :, -1].flatten(1))
    layout = fused_layout(module, "query_key_value.weight")
    split = layout.split(fused)
    assert all(torch.equal(a, b) for a, b in zip(split, expected))
    assert torch.equal(layout.join(split), fused)


class _ProfileBank(nn.Module):
    """A part of an attention class holding a bare parameter named `proj` (Inkling's relative-position profiles)."""

    def __init__(self):
        super().__init__()
        self.proj = nn.Parameter(torch.zeros(4, 8))


class _WithProfileBank(nn.Module):
    def __init__(self):
        super().__init__()
        self.q_proj, self.k_proj, self.v_proj, self.o_proj = (nn.Linear(8, 8) for _ in range(4))
        self.rel_logits_proj = _ProfileBank()


def test_a_bare_parameter_named_proj_inside_a_part_is_not_the_output_projection():
    roles = module_roles(_WithProfileBank())
    assert roles["o_proj.weight"] == "out" and roles["rel_logits_proj.proj"] is None
    alone = nn.Module()
    alone.inner = _ProfileBank()
    assert module_roles(alone)["inner.proj"] == parameter_role("proj") == "out"  # no other: still read by its name


pytest.importorskip("transformers")

from transformers.models.inkling.modeling_inkling import InklingAttention  # noqa: E402


class InklingSoftmaxOverQueries(InklingAttention):
    """Planted: the softmax normalises each key's column (over the queries) instead of each query's row."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        with torch.no_grad():  # its profiles are torch.empty until a model initialises them: no stray NaN
            self.rel_logits_proj.proj.normal_(0.0, 0.02, generator=torch.Generator().manual_seed(0))

    def forward(self, *args, **kwargs):
        with softmax_over_queries():
            return super().forward(*args, **kwargs)


def test_the_inkling_plant_is_real():
    """Independently of attnlab: the planted copy's weights sum to 1 over the queries, the library's over the keys."""
    from transformers.models.inkling.configuration_inkling import InklingTextConfig

    config = InklingTextConfig(hidden_size=64, num_attention_heads=4, head_dim=16, num_key_value_heads=4,
                               swa_num_attention_heads=4, swa_head_dim=16, swa_num_key_value_heads=4,
                               num_hidden_layers=2)
    config._attn_implementation = "eager"
    x = torch.rand(1, 8, 64, generator=torch.Generator().manual_seed(0))
    original = InklingAttention(config, 0).eval()
    planted = InklingSoftmaxOverQueries(config, 0).eval()
    planted.load_state_dict(original.state_dict())
    mask = torch.zeros(8, 8).masked_fill(torch.ones(8, 8, dtype=torch.bool).triu(1), float("-inf"))[None, None]
    with torch.no_grad():
        theirs, mine = original(x, attention_mask=mask)[1], planted(x, attention_mask=mask)[1]
    assert torch.allclose(theirs.sum(-1), torch.ones(1, 4, 8), atol=1e-5)
    assert torch.allclose(mine.sum(-2), torch.ones(1, 4, 8), atol=1e-5)


@pytest.mark.slow
def test_inklings_relative_profile_bank_is_not_read_as_its_output_projection():
    assert_runs_clean("inkling_text", ("score_terms", "scaled_scores"))
    result = attnlab.run(InklingSoftmaxOverQueries, overrides=SIZES)
    assert ("softmax_axis", "weights") in errors(result), [f.message for f in result.findings]
