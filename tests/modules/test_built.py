"""attnlab.modules.built: the one place a module is built from the config and called.

Expected values come from the constructor arguments written out by hand and from the modules
called directly, never from attnlab's own results."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import attnlab
from attnlab.capture.recorder import capture
from attnlab.modules import built
from attnlab.modules.built import BuiltModule, CallConvention, PluginError, as_built, plan

VALUES = dict(d_in=3, d_out=4, context_length=None, dropout=0.0, num_heads=4, num_kv_heads=2, qkv_bias=False,
              n_tokens=5)


class _TupleReturning(nn.Module):
    """Returns (context_vec, attn_weights), as many attention modules do."""

    def __init__(self) -> None:
        super().__init__()
        self.W_query = nn.Linear(3, 2, bias=False)

    def forward(self, x):
        weights = torch.softmax(x @ x.mT, dim=-1)
        return weights @ self.W_query(x), weights


def test_a_plan_holds_the_constructor_arguments_and_the_counts_read_from_them():
    planned = plan("gqa", VALUES)
    assert (planned.args, planned.kwargs) == ((3, 4), {"context_length": 5, "dropout": 0.0, "num_heads": 4,
                                                       "num_kv_heads": 2, "qkv_bias": False})
    assert (planned.num_heads, planned.num_kv_heads, planned.context_length) == (4, 2, 5)
    single = plan("reference", VALUES)  # SelfAttention_v1(d_in, d_out): no head count, no context length
    assert (single.args, single.kwargs, single.num_heads, single.num_kv_heads, single.context_length) == (
        (3, 4), {}, 1, None, 0)


def test_build_seeds_the_constructor_as_the_source_does():
    torch.manual_seed(7)
    expected = [torch.rand(3, 4) for _ in range(3)]  # SelfAttention_v1: W_query, W_key, W_value drawn in order
    module = plan("reference", VALUES).build(seed=7).module
    assert all(torch.equal(p, e) for p, e in zip((module.W_query, module.W_key, module.W_value), expected))


def test_a_constructor_that_raises_is_a_plugin_error_naming_the_variant():
    with pytest.raises(PluginError, match=r"^variant 'gqa' could not be built: AssertionError: num_heads must be divisible by num_kv_heads$"):
        plan("gqa", {**VALUES, "num_kv_heads": 3}).build(seed=1)


def test_kv_heads_come_from_the_module_else_its_constructor():
    assert plan("gqa", VALUES).build(seed=1).num_kv_heads == 2
    assert plan("multi_head_attention", VALUES).build(seed=1).num_kv_heads is None  # takes none: the reference's own


def test_a_returned_tuple_gives_its_first_element_and_says_which():
    module = _TupleReturning()
    x = torch.rand(5, 3)
    returned = as_built(module).call(x)
    context, weights = module(x)
    assert torch.equal(returned.output, context) and returned.element == "[0]"
    assert returned.what == "tuple(Tensor (5, 2), Tensor (5, 5))" and returned.description == "(5, 2)"
    alone = CallConvention().unpack(context, x)
    assert alone.output is context and alone.element is None and alone.what == "Tensor (5, 2)"
    assert CallConvention().unpack(None, x).description == "NoneType"


def test_a_nested_tuple_gives_the_output_inside_its_first_element():
    """I-BERT's attention returns ((context_vec,), (its scaling factor,))."""
    pytest.importorskip("transformers")
    from transformers import IBertConfig
    from transformers.models.ibert.modeling_ibert import IBertSelfAttention

    module = IBertSelfAttention(IBertConfig(hidden_size=64, num_attention_heads=4)).eval()
    torch.nn.init.normal_(module.query.weight)
    x = torch.rand(2, 8, 64, generator=torch.Generator().manual_seed(0))  # (b, num_tokens, d_in)
    with torch.no_grad():
        value = module(x, None)
    returned = CallConvention().unpack(value, x)
    assert returned.output is value[0][0] and returned.element == "[0][0]"


def test_capture_calls_through_the_convention():
    """A convention that passes something besides x: the capture sees the call it makes."""

    class Scaled(nn.Module):
        def forward(self, x, factor):
            return x * factor

    class WithFactor(CallConvention):
        name = "module(x, factor=2)"

        def arguments(self, module, x):
            return (x,), {"factor": 2.0}

    x = torch.rand(5, 3)
    captured = capture(BuiltModule(Scaled(), WithFactor()), x)
    assert torch.equal(captured.stages["output"][0], 2 * x)


def test_the_probe_tells_a_batched_module_from_a_two_dimensional_one():
    assert plan("multi_head_attention", VALUES).build(seed=1).takes_batches(3, 5, 4)
    assert not plan("reference", VALUES).build(seed=1).takes_batches(3, 5, 4)


def test_each_module_is_planned_once_per_seed(monkeypatch):
    """The constructor is filled and the variant looked up once per module and seed (variant and
    reference), however many parts of the run read the counts."""
    calls = []
    real_kwargs, real_get = built.constructor_kwargs, built.get_variant
    monkeypatch.setattr(built, "constructor_kwargs", lambda spec, *a: calls.append(("kwargs", spec.name)) or
                        real_kwargs(spec, *a))
    monkeypatch.setattr(built, "get_variant", lambda name: calls.append(("get", name)) or real_get(name))
    results = attnlab.run("gqa", n_seeds=2, weights="shared", inputs="random", d_out=8, num_heads=4,
                          log={"tensorboard": False})
    assert [r.record.status for r in results] == ["ok", "ok"]
    per_seed = [("get", "gqa"), ("kwargs", "gqa"), ("get", "multi_head_attention"), ("kwargs", "multi_head_attention")]
    assert calls == per_seed * 2


def test_create_variant_builds_through_the_plan():
    module = attnlab.create_variant("gqa", 5, 16, num_heads=4)
    assert module.num_kv_heads == 2 and module.W_query.in_features == 5


def test_every_forward_of_a_run_goes_through_the_call_convention(monkeypatch):
    """The probe, the capture, the batch items rerun alone and the profile: no part calls a module
    itself, so a convention (a mask, position embeddings, a tuple return) reaches every call."""
    inside, outside = [], []
    real_call, cls = CallConvention.call, plan("gqa", VALUES).spec.cls
    real_forward = cls.forward

    def call(self, module, x):
        inside.append(True)
        try:
            return real_call(self, module, x)
        finally:
            inside.pop()

    def forward(self, x):
        outside.append(not inside)
        return real_forward(self, x)

    monkeypatch.setattr(CallConvention, "call", call)
    monkeypatch.setattr(cls, "forward", forward)
    record = attnlab.run("gqa", inputs="random", d_out=8, num_heads=4, profile=True, profile_budget_s=0.05,
                         log={"tensorboard": False}).record
    assert record.status == "ok" and record.profile["forward_ms"] > 0
    assert not record.not_checked  # the batch items differ: each was also run alone
    assert len(outside) > 4 and not any(outside)  # probe, capture, items alone, profile: all through call


def test_a_module_taking_no_kv_head_count_takes_one_per_query_head_from_a_grouped_reference():
    mha = plan("multi_head_attention", VALUES).build(seed=1)
    assert mha.kv_heads_for(VALUES["num_heads"]) == VALUES["num_heads"]
    assert mha.kv_heads_for(1) is None  # another head count: the reference's own, as before
    assert plan("gqa", VALUES).build(seed=1).kv_heads_for(VALUES["num_heads"]) == 2


def test_a_forward_needing_a_package_transformers_lacks_is_one_line_naming_it():
    """DiNAT's attention calls natten; without it transformers raises OptionalDependencyNotAvailable,
    a BaseException that would pass every `except Exception`: the record says which package."""
    pytest.importorskip("transformers")
    if __import__("importlib").util.find_spec("natten") is not None:
        pytest.skip("natten is installed here")
    result = attnlab.run("hf:dinat", overrides=["inputs=random", "inputs.n_tokens=8", "inputs.d_in=64", "d_out=64",
                                                "num_heads=4"])
    assert result.record.status == "failed"
    assert "NeighborhoodAttention's forward needs natten, which is not installed" in result.record.error
    assert "\n" not in result.record.error
