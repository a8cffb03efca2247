"""capture(): every stage found from the data flow alone, equal to independent computations."""

import time

import pytest
import torch
import torch.nn.functional as F

import attnlab
from attnlab.capture import capture
from attnlab.stages import STAGES
from tests._zoo_helpers import BOOK_INPUTS, CORRECT_STYLES, ConstantAttention, build


def _independent(module, x):
    """The stages computed here from the module's parameters, not by the module."""
    w = {name: (p.T if p.shape[0] != x.shape[-1] else p) for name, p in module.named_parameters()}
    wq = next(v for k, v in w.items() if "query" in k)
    wk = next(v for k, v in w.items() if "key" in k)
    wv = next(v for k, v in w.items() if "value" in k)
    q, k, v = x @ wq, x @ wk, x @ wv
    return q, k, v, q @ k.T


@pytest.mark.parametrize("name", ["reference", "linear", "unscaled", "wrong_softmax_axis"])
def test_builtin_variants_every_stage_matches_independent_computation(name):
    module = build(name, 3, 2)
    c = capture(module, BOOK_INPUTS)
    assert c.missing == []
    assert set(c.stages) == set(STAGES)
    assert c.sources == {"queries": "queries", "keys": "keys", "values": "values"}
    q, k, v, scores = _independent(module, BOOK_INPUTS)
    torch.testing.assert_close(c.stages["queries"], q)
    torch.testing.assert_close(c.stages["keys"], k)  # stored un-transposed
    torch.testing.assert_close(c.stages["values"], v)
    torch.testing.assert_close(c.stages["scores"], scores)
    scale = 1.0 if name == "unscaled" else 2 ** -0.5
    torch.testing.assert_close(c.stages["scaled_scores"], scores * scale)
    dim = 0 if name == "wrong_softmax_axis" else 1
    assert c.softmax_dim == dim
    torch.testing.assert_close(c.stages["weights"], torch.softmax(scores * scale, dim=dim))
    torch.testing.assert_close(c.stages["context"], c.stages["weights"] @ v)
    assert c.stages["inputs"] is BOOK_INPUTS


def test_reference_context_equals_scaled_dot_product_attention():
    module = build("reference", 3, 2)
    c = capture(module, BOOK_INPUTS)
    q, k, v, _ = _independent(module, BOOK_INPUTS)
    torch.testing.assert_close(c.stages["context"], F.scaled_dot_product_attention(q, k, v))


@pytest.mark.parametrize("cls", CORRECT_STYLES, ids=lambda c: c.__name__)
def test_other_styles_are_seen_through(cls):
    torch.manual_seed(0)
    x = torch.randn(9, 5)
    module = build(cls, 5, 4)
    c = capture(module, x)
    assert c.missing == []
    assert c.sources == {"queries": "queries", "keys": "keys", "values": "values"}
    assert c.softmax_dim == 1
    q, k, v, scores = _independent(module, x)
    for stage, expected in [("queries", q), ("keys", k), ("values", v), ("scores", scores),
                            ("scaled_scores", scores / 2), ("weights", torch.softmax(scores / 2, dim=-1)),
                            ("context", F.scaled_dot_product_attention(q, k, v))]:
        torch.testing.assert_close(c.stages[stage], expected, msg=stage)


def test_sources_follow_parameters_not_call_order():
    c = capture(build("keys_as_queries", 3, 2), BOOK_INPUTS)
    assert c.sources == {"queries": "keys", "keys": "keys", "values": "values"}
    c = capture(build("transposed_scores", 3, 2), BOOK_INPUTS)
    assert c.sources["queries"] == "keys" and c.sources["keys"] == "queries"


def test_no_softmax_weights_are_the_operand_of_the_values_product():
    module = build("plain_normalisation", 3, 2)
    c = capture(module, BOOK_INPUTS)
    assert c.softmax_dim is None
    assert c.missing == ["scaled_scores"]
    _, _, v, scores = _independent(module, BOOK_INPUTS)
    torch.testing.assert_close(c.stages["weights"], scores / scores.sum(dim=-1, keepdim=True))


def test_stages_are_not_copies():
    c = capture(build("reference", 3, 2), BOOK_INPUTS)
    assert c.stages["keys"].T.data_ptr() == c.stages["keys"].data_ptr()
    assert c.stages["keys"].is_contiguous()  # keys stored (n_tokens, d), as the module built them


def test_invisible_variant_marks_stages_missing():
    c = capture(ConstantAttention(3, 2), BOOK_INPUTS)
    assert set(c.stages) == {"inputs", "context"}
    assert c.missing == [s for s in STAGES if s not in ("inputs", "context")]
    assert c.softmax_dim is None
    assert c.sources == {"queries": None, "keys": None, "values": None}


class _Tapped(torch.nn.Module):
    """Scores made by an op capture cannot read (a Python loop over rows), marked with tap."""

    def __init__(self, d_in, d_out):
        super().__init__()
        self.W_query = torch.nn.Parameter(torch.rand(d_in, d_out))
        self.W_key = torch.nn.Parameter(torch.rand(d_in, d_out))
        self.W_value = torch.nn.Parameter(torch.rand(d_in, d_out))

    def forward(self, x):
        queries, keys, values = x @ self.W_query, x @ self.W_key, x @ self.W_value
        scores = torch.stack([(keys * q).sum(-1) for q in queries])
        scores = attnlab.tap("scores", scores)
        return torch.softmax(scores / keys.shape[-1] ** 0.5, dim=-1) @ values


def test_explicit_tap_wins_and_is_a_no_op_outside_capture():
    module = build(_Tapped, 3, 2)
    c = capture(module, BOOK_INPUTS)
    assert c.missing == ["queries", "keys"]
    q, k, v, scores = _independent(module, BOOK_INPUTS)
    torch.testing.assert_close(c.stages["scores"], scores)
    torch.testing.assert_close(c.stages["values"], v)
    assert c.softmax_dim == 1
    t = torch.ones(2)
    assert attnlab.tap("weights", t) is t
    with pytest.raises(ValueError):
        attnlab.tap("logits", t)


def test_capture_runs_without_grad():
    c = capture(build("reference", 3, 2), BOOK_INPUTS)
    assert not c.stages["context"].requires_grad


@pytest.mark.slow
def test_capture_overhead_at_4096_tokens_is_small():
    torch.manual_seed(0)
    x = torch.rand(4096, 64)
    module = build("reference", 64, 64)

    plain, captured = [], []
    for _ in range(9):  # interleaved, so background load hits both alike
        start = time.perf_counter()
        with torch.no_grad():
            module(x)
        plain.append(time.perf_counter() - start)
        start = time.perf_counter()
        capture(module, x)
        captured.append(time.perf_counter() - start)
    assert min(captured) <= min(plain) * 1.25  # target 10%; slack for a noisy shared CPU
