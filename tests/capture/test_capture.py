"""capture(): every stage found from the data flow alone, equal to independent computations."""

import math

import pytest
import torch
import torch.nn.functional as F

import attnlab
from attnlab.capture.recorder import capture
from attnlab.capture.stages import STAGES
from tests._zoo_helpers import BOOK_INPUTS, CORRECT_STYLES, ConstantAttention, build


def _2d(c, stage):
    """A 2-D module's stage as the module made it: the canonical view has size-1 batch (and heads) axes."""
    t = c.stages[stage]
    lead = (1,) if stage in ("inputs", "output") else (1, 1)
    assert tuple(t.shape[:len(lead)]) == lead, (stage, t.shape)
    assert tuple(t.shape[len(lead):]) == tuple(c.native_shapes[stage]), (stage, t.shape, c.native_shapes[stage])
    return t[(0,) * len(lead)]


def _same_tensor(a, b):
    """`a` is `b` or a view of exactly its elements: not a copy."""
    return a.shape == b.shape and a.stride() == b.stride() and a.data_ptr() == b.data_ptr()


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
    assert set(c.stages) == set(STAGES) - {"weights_applied"}  # eval mode: the weights are what is applied
    assert c.sources == {"queries": "queries", "keys": "keys", "values": "values"}
    assert c.score_roles == ("queries", "keys")
    q, k, v, scores = _independent(module, BOOK_INPUTS)
    torch.testing.assert_close(_2d(c, "queries"), q)
    torch.testing.assert_close(_2d(c, "keys"), k)  # stored un-transposed
    torch.testing.assert_close(_2d(c, "values"), v)
    torch.testing.assert_close(_2d(c, "scores"), scores)
    scale = 1.0 if name == "unscaled" else 2 ** -0.5
    torch.testing.assert_close(_2d(c, "scaled_scores"), scores * scale)
    dim = 0 if name == "wrong_softmax_axis" else 1
    assert c.softmax_dim == dim and c.softmax_axis == dim + 2
    torch.testing.assert_close(_2d(c, "weights"), torch.softmax(scores * scale, dim=dim))
    torch.testing.assert_close(_2d(c, "context"), _2d(c, "weights") @ v)
    assert c.output_is_context and torch.equal(_2d(c, "output"), _2d(c, "context"))
    assert _same_tensor(_2d(c, "inputs"), BOOK_INPUTS)
    assert c.native_shapes == {"inputs": (6, 3), "queries": (6, 2), "keys": (6, 2), "values": (6, 2),
                               "scores": (6, 6), "scaled_scores": (6, 6), "weights": (6, 6), "context": (6, 2),
                               "output": (6, 2)}


def test_reference_context_equals_scaled_dot_product_attention():
    module = build("reference", 3, 2)
    c = capture(module, BOOK_INPUTS)
    q, k, v, _ = _independent(module, BOOK_INPUTS)
    torch.testing.assert_close(_2d(c, "context"), F.scaled_dot_product_attention(q, k, v))


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
        torch.testing.assert_close(_2d(c, stage), expected, msg=stage)


def test_sources_follow_parameters_not_call_order():
    c = capture(build("keys_as_queries", 3, 2), BOOK_INPUTS)
    assert c.sources == {"queries": "keys", "keys": "keys", "values": "values"}
    # keys @ queries.T: the operands keep the labels of the parameters they come from;
    # their positions in the product are in score_roles
    module = build("transposed_scores", 3, 2)
    c = capture(module, BOOK_INPUTS)
    assert c.sources == {"queries": "queries", "keys": "keys", "values": "values"}
    assert c.score_roles == ("keys", "queries")
    q, k, _, scores = _independent(module, BOOK_INPUTS)
    torch.testing.assert_close(_2d(c, "queries"), q)
    torch.testing.assert_close(_2d(c, "keys"), k)
    torch.testing.assert_close(_2d(c, "scores"), scores.T)


def test_no_softmax_weights_are_the_operand_of_the_values_product():
    module = build("plain_normalisation", 3, 2)
    c = capture(module, BOOK_INPUTS)
    assert c.softmax_dim is None
    assert c.missing == ["scaled_scores"]
    _, _, v, scores = _independent(module, BOOK_INPUTS)
    torch.testing.assert_close(_2d(c, "weights"), scores / scores.sum(dim=-1, keepdim=True))


def test_stages_are_not_copies():
    c = capture(build("reference", 3, 2), BOOK_INPUTS)
    assert _2d(c, "keys").T.data_ptr() == _2d(c, "keys").data_ptr()
    assert _2d(c, "keys").is_contiguous()  # keys stored (n_tokens, d), as the module built them


def test_invisible_variant_marks_stages_missing():
    c = capture(ConstantAttention(3, 2), BOOK_INPUTS)
    assert set(c.stages) == {"inputs", "output"}
    assert c.missing == [s for s in STAGES if s not in ("inputs", "weights_applied", "output")]
    assert not c.output_is_context and torch.equal(_2d(c, "output"), torch.zeros(6, 2))
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
    torch.testing.assert_close(_2d(c, "scores"), scores)
    torch.testing.assert_close(_2d(c, "values"), v)
    assert c.softmax_dim == 1 and c.softmax_axis == 3
    # the data flow after the tapped scores is read as usual
    torch.testing.assert_close(_2d(c, "weights"), torch.softmax(scores * 2 ** -0.5, dim=-1))
    torch.testing.assert_close(_2d(c, "context"), _2d(c, "weights") @ v)
    assert c.output_is_context
    t = torch.ones(2)
    assert attnlab.tap("weights", t) is t
    with pytest.raises(ValueError):
        attnlab.tap("logits", t)


def test_capture_runs_without_grad():
    c = capture(build("reference", 3, 2), BOOK_INPUTS)
    assert not _2d(c, "context").requires_grad


# --- queries / keys scaled before the score product --------------------------------------------

class _Prescaled(torch.nn.Module):
    """SelfAttention_v1's parameters; `forward` is set per style below (scale: the factor used)."""

    scale_power = -0.5

    def __init__(self, d_in, d_out):
        super().__init__()
        self.W_query = torch.nn.Parameter(torch.rand(d_in, d_out))
        self.W_key = torch.nn.Parameter(torch.rand(d_in, d_out))
        self.W_value = torch.nn.Parameter(torch.rand(d_in, d_out))


def _prescaled(name, forward):
    return type(name, (_Prescaled,), {"forward": forward})


def _d(m):
    return m.W_key.shape[-1]


_PRESCALED = {  # style -> (class, {stage: factor as a function of d_k}, exact: the stage is the module's tensor)
    "queries_times_pow": (_prescaled("QPow", lambda m, x: torch.softmax(
        ((x @ m.W_query) * _d(m) ** -0.5) @ (x @ m.W_key).T, dim=-1) @ (x @ m.W_value)),
        {"queries": lambda d: d ** -0.5}, True),
    "queries_over_sqrt": (_prescaled("QSqrt", lambda m, x: torch.softmax(
        ((x @ m.W_query) / math.sqrt(_d(m))) @ (x @ m.W_key).T, dim=-1) @ (x @ m.W_value)),
        {"queries": lambda d: d ** -0.5}, True),
    "keys_T_scaled": (_prescaled("KT", lambda m, x: torch.softmax(
        (x @ m.W_query) @ ((x @ m.W_key).T * _d(m) ** -0.5), dim=-1) @ (x @ m.W_value)),
        {"keys": lambda d: d ** -0.5}, True),
    "einsum_scaled_operand": (_prescaled("Ein", lambda m, x: torch.softmax(torch.einsum(
        "id,jd->ij", (x @ m.W_query) * _d(m) ** -0.5, x @ m.W_key), dim=-1) @ (x @ m.W_value)),
        {"queries": lambda d: d ** -0.5}, True),
    "both_quarter_power": (_prescaled("Both", lambda m, x: torch.softmax(
        ((x @ m.W_query) * _d(m) ** -0.25) @ ((x @ m.W_key) * _d(m) ** -0.25).mT, dim=-1) @ (x @ m.W_value)),
        {"queries": lambda d: d ** -0.25, "keys": lambda d: d ** -0.25}, True),
    "weight_scaled": (_prescaled("W", lambda m, x: torch.softmax(
        (x @ (m.W_query / math.sqrt(_d(m)))) @ (x @ m.W_key).T, dim=-1) @ (x @ m.W_value)),
        {"queries": lambda d: d ** -0.5}, False),
    "zero_dim_tensor": (_prescaled("T0", lambda m, x: torch.softmax(
        ((x @ m.W_query) * torch.rsqrt(torch.tensor(float(_d(m))))) @ (x @ m.W_key).T, dim=-1) @ (x @ m.W_value)),
        {"queries": lambda d: d ** -0.5}, True),
    "in_place": (_prescaled("InPlace", lambda m, x: (lambda q: torch.softmax(
        q.mul_(_d(m) ** -0.5) @ (x @ m.W_key).T, dim=-1) @ (x @ m.W_value))(x @ m.W_query)),
        {"queries": lambda d: d ** -0.5}, False),
    "wrong_factor": (_prescaled("Wrong", lambda m, x: torch.softmax(
        ((x @ m.W_query) * _d(m) ** -1) @ (x @ m.W_key).T, dim=-1) @ (x @ m.W_value)),
        {"queries": lambda d: 1 / d}, True),
}


@pytest.mark.parametrize("style", list(_PRESCALED))
def test_prescaled_projections_are_stored_unscaled_with_the_factor_noted(style):
    cls, factors, exact = _PRESCALED[style]
    torch.manual_seed(0)
    x = torch.randn(7, 5)
    module = build(cls, 5, 4)
    c = capture(module, x)
    assert c.missing == []
    assert c.sources == {"queries": "queries", "keys": "keys", "values": "values"}
    assert c.softmax_dim == 1
    assert c.prescale == pytest.approx({stage: f(4) for stage, f in factors.items()}, rel=1e-6)
    q, k, v, scores = _independent(module, x)
    for stage, expected in (("queries", q), ("keys", k), ("values", v)):
        if exact and stage in factors or stage == "values":
            assert torch.equal(_2d(c, stage), expected), stage  # the module's own product, not a copy
        torch.testing.assert_close(_2d(c, stage), expected, msg=stage)
    torch.testing.assert_close(_2d(c, "scores"), scores)  # the raw product, whatever the pre-factor
    total = math.prod(f(4) for f in factors.values())
    torch.testing.assert_close(_2d(c, "scaled_scores"), scores * total)
    torch.testing.assert_close(_2d(c, "weights"), torch.softmax(scores * total, dim=-1))


def test_prescaled_values_stay_as_the_module_used_them():
    cls = _prescaled("V2", lambda m, x: torch.softmax(
        (x @ m.W_query) @ (x @ m.W_key).T / _d(m) ** 0.5, dim=-1) @ ((x @ m.W_value) * 2))
    module = build(cls, 3, 2)
    c = capture(module, BOOK_INPUTS)
    _, _, v, _ = _independent(module, BOOK_INPUTS)
    torch.testing.assert_close(_2d(c, "values"), 2 * v)
    assert c.prescale == {} and c.sources["values"] == "values"


def test_scores_scaled_in_place_keep_the_raw_scores():
    def forward(m, x):
        scores = (x @ m.W_query) @ (x @ m.W_key).T
        scores /= _d(m) ** 0.5
        return torch.softmax(scores, dim=-1) @ (x @ m.W_value)

    module = build(_prescaled("InPlaceScores", forward), 3, 2)
    c = capture(module, BOOK_INPUTS)
    _, _, _, scores = _independent(module, BOOK_INPUTS)
    torch.testing.assert_close(_2d(c, "scores"), scores)
    torch.testing.assert_close(_2d(c, "scaled_scores"), scores * 2 ** -0.5)


def test_queries_times_a_table_added_to_the_scores_is_a_term_and_the_scale_is_read_from_the_ops():
    """BROS's `einsum(queries, box positions)` added to the scores before / sqrt(d): the table is no
    parameter nor input of the module; the sum is no scaled scores, its factor is the division's."""
    table = torch.randn(7, 7, 4, generator=torch.Generator().manual_seed(1))  # (queries, keys, d_k)

    def forward(m, x):
        queries = x @ m.W_query
        scores = queries @ (x @ m.W_key).T + torch.einsum("id,ijd->ij", queries, table)
        return torch.softmax(scores / _d(m) ** 0.5, dim=-1) @ (x @ m.W_value)

    module = build(_prescaled("TableTerm", forward), 5, 4)
    c = capture(module, torch.randn(7, 5, generator=torch.Generator().manual_seed(0)))
    assert c.score_terms == pytest.approx(4 ** -0.5)


def test_prescaled_stages_are_the_modules_tensors_except_the_raw_scores():
    """The one extra tensor a pre-factor costs is the raw (n x n) scores; the rest are the module's own."""
    held = {}

    def forward(m, x):
        keys = held["keys"] = x @ m.W_key
        unscaled = held["unscaled"] = x @ m.W_query
        scores = held["scores"] = (unscaled * _d(m) ** -0.5) @ keys.T
        return torch.softmax(scores, dim=-1) @ (x @ m.W_value)

    c = capture(build(_prescaled("Held", forward), 3, 2), BOOK_INPUTS)
    assert _same_tensor(_2d(c, "queries"), held["unscaled"])
    assert _2d(c, "keys").data_ptr() == held["keys"].data_ptr()  # keys.T seen, stored as a view of keys
    assert _same_tensor(_2d(c, "scaled_scores"), held["scores"])
    assert _2d(c, "scores").data_ptr() != held["scores"].data_ptr()
    torch.testing.assert_close(_2d(c, "scores"), held["unscaled"] @ held["keys"].T)


# --- hand-written softmax -------------------------------------------------------------------------

def _scaled(m, x):
    return (x @ m.W_query) @ (x @ m.W_key).T / _d(m) ** 0.5


def _manual_shifted(m, x):
    s = _scaled(m, x)
    e = torch.exp(s - s.max(dim=-1, keepdim=True).values)
    return (e / e.sum(dim=-1, keepdim=True)) @ (x @ m.W_value)


def _manual_written_twice(m, x):
    s = _scaled(m, x)
    return (torch.exp(s - s.max(dim=-1, keepdim=True).values)
            / torch.exp(s - s.max(dim=-1, keepdim=True).values).sum(dim=-1, keepdim=True)) @ (x @ m.W_value)


def _manual_plain(m, x):
    s = _scaled(m, x)
    return (s.exp() / s.exp().sum(-1, keepdim=True)) @ (x @ m.W_value)


def _manual_amax_unsqueezed(m, x):
    s = _scaled(m, x)
    e = (s - s.amax(-1, keepdim=True)).exp()
    return (e / torch.sum(e, 1).unsqueeze(-1)) @ (x @ m.W_value)


def _manual_products_twice(m, x):
    q, k = x @ m.W_query, x @ m.W_key
    return ((q @ k.T / _d(m) ** 0.5).exp() / (q @ k.T / _d(m) ** 0.5).exp().sum(-1, keepdim=True)) @ (x @ m.W_value)


def _manual_shift_then_scale(m, x):
    s = (x @ m.W_query) @ (x @ m.W_key).T
    e = torch.exp((s - s.max(dim=-1, keepdim=True).values) / _d(m) ** 0.5)
    return (e / e.sum(dim=-1, keepdim=True)) @ (x @ m.W_value)


def _softmax_of_shift_then_scale(m, x):
    s = (x @ m.W_query) @ (x @ m.W_key).T
    return torch.softmax((s - s.amax(-1, keepdim=True)) * _d(m) ** -0.5, dim=-1) @ (x @ m.W_value)


def _log_softmax_exp(m, x):
    return F.log_softmax(_scaled(m, x), dim=-1).exp() @ (x @ m.W_value)


def _manual_dim0(m, x):
    s = _scaled(m, x)
    e = torch.exp(s - s.max(dim=0, keepdim=True).values)
    return (e / e.sum(dim=0, keepdim=True)) @ (x @ m.W_value)


@pytest.mark.parametrize("forward, dim", [
    (_manual_shifted, 1), (_manual_written_twice, 1), (_manual_plain, 1), (_manual_amax_unsqueezed, 1),
    (_manual_products_twice, 1), (_log_softmax_exp, 1), (_manual_dim0, 0), (_manual_shift_then_scale, 1),
    (_softmax_of_shift_then_scale, 1),
], ids=lambda f: getattr(f, "__name__", str(f)))
def test_hand_written_softmax_is_recognised(forward, dim):
    torch.manual_seed(0)
    x = torch.randn(7, 5)
    module = build(_prescaled(forward.__name__, forward), 5, 4)
    c = capture(module, x)
    assert c.missing == []
    assert c.softmax_dim == dim
    _, _, v, scores = _independent(module, x)
    torch.testing.assert_close(_2d(c, "scores"), scores)
    torch.testing.assert_close(_2d(c, "scaled_scores"), scores / 2)  # before any max-subtraction
    torch.testing.assert_close(_2d(c, "weights"), torch.softmax(scores / 2, dim=dim))
    torch.testing.assert_close(_2d(c, "context"), _2d(c, "weights") @ v)


def test_hand_written_softmax_input_is_the_modules_tensor():
    holder = {}

    def forward(m, x):
        s = holder["s"] = _scaled(m, x)
        e = torch.exp(s - s.max(dim=-1, keepdim=True).values)
        w = holder["w"] = e / e.sum(dim=-1, keepdim=True)
        return w @ (x @ m.W_value)

    c = capture(build(_prescaled("Held", forward), 3, 2), BOOK_INPUTS)
    assert _same_tensor(_2d(c, "scaled_scores"), holder["s"]) and _same_tensor(_2d(c, "weights"), holder["w"])


@pytest.mark.parametrize("denominator", [
    lambda e: e.sum(dim=-1),  # no keepdim: divides column j by row j's sum
    lambda e: e.sum(),  # one total, not a sum along a dim
    lambda e: e.sum(dim=-1, keepdim=True) + 1,
], ids=["no_keepdim", "total", "plus_one"])
def test_exp_over_a_sum_that_is_not_a_softmax_is_not_recognised(denominator):
    def forward(m, x):
        s = _scaled(m, x)
        e = torch.exp(s - s.max(dim=-1, keepdim=True).values)
        return (e / denominator(e)) @ (x @ m.W_value)

    c = capture(build(_prescaled("NotSoftmax", forward), 3, 2), BOOK_INPUTS)
    assert c.missing == ["scaled_scores"] and c.softmax_dim is None
    assert "weights" in c.stages  # still found as the operand of the values product


def test_softmax_dim_is_in_the_modules_rank_and_the_axis_canonical():
    def forward(m, x):  # x: (1, n_tokens, d_in)
        keys, queries = x @ m.W_key, x @ m.W_query
        return torch.softmax(queries @ keys.transpose(-2, -1) / _d(m) ** 0.5, dim=-1) @ (x @ m.W_value)

    c = capture(build(_prescaled("Batched", forward), 3, 2), BOOK_INPUTS[None])
    assert c.native_shapes["weights"] == (1, 6, 6) and c.stages["weights"].shape == (1, 1, 6, 6)
    assert c.softmax_dim == 2 and c.softmax_axis == 3  # dim=-1 of the (1, 6, 6) weights
    c = capture(build(_prescaled("Flat", _manual_dim0), 3, 2), BOOK_INPUTS)
    assert c.native_shapes["weights"] == (6, 6) and c.softmax_dim == 0 and c.softmax_axis == 2


class _BranchBeside(torch.nn.Module):
    """Heads of query/key/value Linears, beside them a kernel made and softmaxed from projections of no role
    (ConvBERT's dynamic convolution), and a kernel-1 Conv1d as a fourth projection of x."""

    def __init__(self) -> None:
        super().__init__()
        self.query, self.key, self.value = (torch.nn.Linear(8, 8, bias=False) for _ in range(3))
        self.kernel = torch.nn.Linear(8, 3, bias=False)
        self.spread = torch.nn.Conv1d(8, 4, kernel_size=1, bias=False)

    def forward(self, x):  # (b, T, 8)
        queries, keys, values = self.query(x), self.key(x), self.value(x)  # each (b, T, 8)
        kernel = torch.softmax(self.kernel(queries), dim=-1)  # (b, T, 3)
        spread = self.spread(x.transpose(1, 2)).transpose(1, 2)  # (b, T, 4)
        branch = spread[..., :3].unsqueeze(-2) @ kernel.unsqueeze(-1)  # (b, T, 1, 1): a product of its own
        weights = torch.softmax(queries @ keys.mT / 8**0.5, dim=-1)  # (b, T, T)
        return weights @ values + branch.squeeze(-1)  # (b, T, 8)


def test_a_product_of_projections_that_are_not_queries_or_keys_is_not_the_scores():
    """The kernel branch's softmax and product come first; the scores are still queries @ keys.T."""
    torch.manual_seed(0)
    module, x = _BranchBeside(), torch.randn(2, 5, 8)
    got = capture(module, x)
    with torch.no_grad():
        queries, keys = x @ module.query.weight.T, x @ module.key.weight.T  # (b, T, 8)
        torch.testing.assert_close(got.stages["scores"].reshape(2, 5, 5), queries @ keys.mT)
    assert got.sources["queries"] == "queries" and got.sources["keys"] == "keys"


class _PrescaledWithBias(torch.nn.Module):
    """Queries scaled before the product and a learned bias added to them (Funnel's q * scale + r_w_bias * scale)."""

    def __init__(self) -> None:
        super().__init__()
        self.W_query, self.W_key, self.W_value = (torch.nn.Linear(8, 8, bias=False) for _ in range(3))
        self.content_bias = torch.nn.Parameter(torch.randn(8))

    def forward(self, x):  # (b, T, 8)
        queries = self.W_query(x) * 0.25 + self.content_bias * 0.25  # (b, T, 8)
        weights = torch.softmax(queries @ self.W_key(x).mT, dim=-1)  # (b, T, T)
        return weights @ self.W_value(x)


def test_a_prescaled_projection_plus_a_learned_bias_keeps_its_factor():
    torch.manual_seed(0)
    module, x = _PrescaledWithBias(), torch.randn(2, 5, 8)
    got = capture(module, x)
    assert got.prescale == {"queries": 0.25}
    with torch.no_grad():
        expected = x @ module.W_query.weight.T + module.content_bias  # (b, T, 8): the stage before the factor
    torch.testing.assert_close(got.stages["queries"].reshape(2, 5, 8), expected)
