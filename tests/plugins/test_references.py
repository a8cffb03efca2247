"""The built-in reference variants and the corpus of correct implementations (tests/implementations/)
are right, each checked against an oracle that shares no code with it: the source's own classes
from tests/fixtures/source/ch03.py, or F.scaled_dot_product_attention(is_causal=True) on the same weights.

The corpus is what the "no false finding" tests run; this file proves it is correct first.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from attnlab.modules.registry import Registry, constructor_kwargs, discover

IMPLEMENTATIONS = Path(__file__).resolve().parents[1] / "implementations"

BOOK_INPUTS = torch.tensor(
    [[0.43, 0.15, 0.89], [0.55, 0.87, 0.66], [0.57, 0.85, 0.64],
     [0.22, 0.58, 0.33], [0.77, 0.25, 0.10], [0.05, 0.80, 0.55]]
)
BATCH = torch.stack((BOOK_INPUTS, BOOK_INPUTS))  # the source's batch: (2, 6, 3)


@pytest.fixture(scope="module")
def registry() -> Registry:
    """The registry with the corpus on the plugin path (the built-ins are always there)."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("ATTNLAB_PLUGIN_PATH", str(IMPLEMENTATIONS))
        discover.cache_clear()
        found = discover()
    discover.cache_clear()
    return found


def build(registry: Registry, name: str, **values: Any) -> nn.Module:
    spec = registry.get(name)
    args, kwargs = constructor_kwargs(spec, values, {})
    return spec.cls(*args, **kwargs).eval()


# --- the oracle: F.scaled_dot_product_attention on weights read out of each layout ----------------

Projection = tuple[torch.Tensor, torch.Tensor | None]  # (weight (out, in) as nn.Linear has it, bias)


def _linear(layer: nn.Linear) -> Projection:
    return layer.weight, layer.bias


def _fused(weight: torch.Tensor, bias: torch.Tensor | None) -> tuple[Projection, Projection, Projection]:
    """Queries, keys, values of a fused (3 * d_out, d_in) projection, by position."""
    weights = weight.chunk(3, dim=0)
    biases = bias.chunk(3, dim=0) if bias is not None else (None, None, None)
    return tuple(zip(weights, biases))


def _qkvo(q: Projection, k: Projection, v: Projection, o: Projection, heads: int, kv_heads: int | None = None) -> dict:
    return dict(q=q, k=k, v=v, o=o, heads=heads, kv_heads=kv_heads or heads)


# How each layout holds queries, keys, values and the output projection; the oracle reads them.
LAYOUTS: dict[str, Callable[[nn.Module], dict]] = {
    "MultiHeadAttention": lambda m: _qkvo(_linear(m.W_query), _linear(m.W_key), _linear(m.W_value), _linear(m.out_proj), m.num_heads),
    "BonusPyTorchMultiHeadAttention": lambda m: _qkvo(*_fused(m.qkv.weight, m.qkv.bias), _linear(m.proj), m.num_heads),
    "EinsumMultiHeadAttention": lambda m: _qkvo(
        (m.W_query.T, m.b_query), (m.W_key.T, m.b_key), (m.W_value.T, m.b_value), _linear(m.out_proj), m.num_heads
    ),
    "SDPABoolMaskAttention": lambda m: _qkvo(_linear(m.W_query), _linear(m.W_key), _linear(m.W_value), _linear(m.out_proj), m.num_heads),
    "NNMultiheadAttention": lambda m: _qkvo(*_fused(m.attn.in_proj_weight, m.attn.in_proj_bias), _linear(m.attn.out_proj), m.attn.num_heads),
    "TorchMultiHeadAttention": lambda m: _qkvo(*_fused(m.mha.in_proj_weight, m.mha.in_proj_bias), _linear(m.mha.out_proj), m.mha.num_heads),
    "NanoGPTCausalSelfAttention": lambda m: _qkvo(*_fused(m.c_attn.weight, m.c_attn.bias), _linear(m.c_proj), m.n_head),
    "QKVOAttention": lambda m: _qkvo(
        _linear(m.q_proj), _linear(m.k_proj), _linear(m.v_proj), _linear(m.o_proj), m.num_heads, m.num_key_value_heads
    ),
}


def sdpa_oracle(x: torch.Tensor, layout: dict) -> torch.Tensor:
    """Causal multi-head attention by F.scaled_dot_product_attention(is_causal=True)."""
    b, n, _ = x.shape

    def heads(name: str, count: int) -> torch.Tensor:
        weight, bias = layout[name]
        return F.linear(x, weight, bias).view(b, n, count, -1).transpose(1, 2)  # (b, heads, n, head_dim)

    q, k, v = heads("q", layout["heads"]), heads("k", layout["kv_heads"]), heads("v", layout["kv_heads"])
    context = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=layout["kv_heads"] != layout["heads"])
    return F.linear(context.transpose(1, 2).reshape(b, n, -1), *layout["o"])


def randomise(module: nn.Module, seed: int) -> None:
    """Every parameter drawn afresh (biases included: several layouts initialise them to zero,
    which would let a bias mix-up pass)."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for parameter in module.parameters():
            parameter.copy_(torch.rand(parameter.shape, generator=generator) * 2 - 1)


# (batch, tokens, d_in, d_out, heads, kv_heads); d_in != d_out only where the layout allows it
SHAPES = [(2, 6, 3, 4, 2, 2), (1, 1, 5, 8, 4, 4), (3, 17, 8, 8, 1, 1), (2, 33, 12, 16, 8, 8)]
CORPUS = {  # variant name -> (class name, d_in must equal d_out)
    "bonus_pytorch_mha": ("BonusPyTorchMultiHeadAttention", False),
    "einsum_mha": ("EinsumMultiHeadAttention", False),
    "sdpa_bool_mask": ("SDPABoolMaskAttention", False),
    "nn_mha_need_weights": ("NNMultiheadAttention", True),
    "nn_mha_no_weights": ("NNMultiheadAttention", True),
    "nanogpt_block": ("NanoGPTCausalSelfAttention", False),
    "qkvo_proj": ("QKVOAttention", False),
    "torch_mha": ("TorchMultiHeadAttention", True),
    "multi_head_attention": ("MultiHeadAttention", False),
}


def test_every_corpus_file_is_a_variant_without_warnings(registry):
    assert not registry.warnings, registry.warnings
    assert set(CORPUS) <= set(registry.specs)
    assert all(registry.get(name).cls.__name__ == cls for name, (cls, _) in CORPUS.items())


@pytest.mark.parametrize("qkv_bias", [False, True])
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "b{}-n{}-din{}-dout{}-h{}-kv{}".format(*s))
@pytest.mark.parametrize("name", sorted(CORPUS))
def test_each_implementation_equals_the_sdpa_oracle_on_its_own_weights(registry, name, shape, qkv_bias):
    batch, n_tokens, d_in, d_out, heads, kv_heads = shape
    if CORPUS[name][1]:
        d_in = d_out  # nn.MultiheadAttention keeps the input's width
    module = build(registry, name, d_in=d_in, d_out=d_out, context_length=None, n_tokens=n_tokens, dropout=0.0,
                   num_heads=heads, num_kv_heads=kv_heads, qkv_bias=qkv_bias)
    randomise(module, seed=sum(shape))
    x = torch.rand(batch, n_tokens, d_in, generator=torch.Generator().manual_seed(7)) * 2 - 1
    with torch.no_grad():
        expected = sdpa_oracle(x, LAYOUTS[CORPUS[name][0]](module))
        assert module(x).shape == (batch, n_tokens, d_out)
        torch.testing.assert_close(module(x), expected, atol=1e-5, rtol=1e-4)


def test_grouped_key_value_heads_equal_the_oracle_under_every_spelling_attnlab_passes(registry):
    """qkvo_proj names the top-level num_kv_heads `num_key_value_heads`, as Hugging Face does."""
    module = build(registry, "qkvo_proj", d_in=6, d_out=8, context_length=5, dropout=0.0, num_heads=4,
                   num_kv_heads=2, qkv_bias=True)
    assert module.k_proj.out_features == 4  # two key/value heads of head_dim 2
    randomise(module, seed=3)
    x = torch.rand(2, 5, 6)
    with torch.no_grad():
        torch.testing.assert_close(module(x), sdpa_oracle(x, LAYOUTS["QKVOAttention"](module)), atol=1e-5, rtol=1e-4)


def test_the_oracle_fails_a_module_without_its_causal_mask(registry):
    """The oracle can fail: the built-in MultiHeadAttention with its mask buffer cleared (every
    token sees every token) no longer matches it."""
    module = build(registry, "multi_head_attention", d_in=3, d_out=4, context_length=6, dropout=0.0, num_heads=2, qkv_bias=False)
    module.mask.zero_()
    with torch.no_grad():
        assert not torch.allclose(module(BATCH), sdpa_oracle(BATCH, LAYOUTS["MultiHeadAttention"](module)), atol=1e-3)


def test_the_sdpa_oracle_agrees_with_the_sources_multi_head_attention(ch03):
    torch.manual_seed(123)
    source = ch03.MultiHeadAttention(5, 8, 9, 0.0, num_heads=4, qkv_bias=True).eval()
    randomise(source, seed=11)
    x = torch.rand(3, 9, 5)
    with torch.no_grad():
        torch.testing.assert_close(sdpa_oracle(x, LAYOUTS["MultiHeadAttention"](source)), source(x), atol=1e-5, rtol=1e-4)


# --- the built-in references are the source's classes: same seed, same parameters, same output -----

BUILT_IN_SOURCES = [  # (built-in, the source's class, num_heads or None for a class without heads)
    ("reference", "SelfAttention_v1", None),
    ("linear", "SelfAttention_v2", None),
    ("causal_attention", "CausalAttention", None),
    ("mha_wrapper", "MultiHeadAttentionWrapper", 2),
    ("multi_head_attention", "MultiHeadAttention", 2),
    ("multi_head_attention", "MultiHeadAttention", 1),
]


@pytest.mark.parametrize(
    ("name", "source_class", "num_heads", "qkv_bias"),
    [(*case, bias) for case in BUILT_IN_SOURCES for bias in (False, True) if not (bias and case[0] == "reference")],
)
def test_a_built_in_reference_is_the_sources_class_parameter_for_parameter(ch03, registry, name, source_class, num_heads, qkv_bias):
    spec = registry.get(name)
    d_out = 2 * (num_heads or 1)
    values = dict(d_in=3, d_out=d_out, context_length=6, dropout=0.0, num_heads=num_heads or 2, qkv_bias=qkv_bias)
    torch.manual_seed(123)
    args, kwargs = constructor_kwargs(spec, values, {})
    ours = spec.cls(*args, **kwargs).eval()
    torch.manual_seed(123)
    source_args = {"d_in": 3, "d_out": d_out}
    if source_class != "SelfAttention_v1":
        source_args |= {"qkv_bias": qkv_bias}
    if source_class not in ("SelfAttention_v1", "SelfAttention_v2"):
        source_args |= {"context_length": 6, "dropout": 0.0}
    if num_heads:
        source_args |= {"num_heads": num_heads}
    theirs = getattr(ch03, source_class)(**source_args).eval()

    ours_state, theirs_state = ours.state_dict(), theirs.state_dict()
    assert list(ours_state) == list(theirs_state)
    for key in theirs_state:
        torch.testing.assert_close(ours_state[key], theirs_state[key], atol=0, rtol=0)
    x = BOOK_INPUTS if source_class.startswith("SelfAttention") else BATCH
    with torch.no_grad():
        torch.testing.assert_close(ours(x), theirs(x), atol=0, rtol=0)


def test_causal_attention_reproduces_the_sources_printed_context_vectors(registry):
    """Section 3.5.3: seed 123, d_in 3, d_out 2, the book inputs stacked twice."""
    torch.manual_seed(123)
    module = build(registry, "causal_attention", d_in=3, d_out=2, context_length=6, dropout=0.0, num_heads=2, qkv_bias=False)
    expected = torch.tensor([[-0.4519, 0.2216], [-0.5874, 0.0058], [-0.6300, -0.0632],
                             [-0.5675, -0.0843], [-0.5526, -0.0981], [-0.5299, -0.1081]])
    with torch.no_grad():
        out = module(BATCH)
    assert out.shape == (2, 6, 2)
    torch.testing.assert_close(out, torch.stack((expected, expected)), atol=1e-4, rtol=0)


def test_the_wrapper_returns_num_heads_times_d_out_columns(registry):
    module = build(registry, "mha_wrapper", d_in=3, d_out=2, context_length=6, dropout=0.0, num_heads=3, qkv_bias=False)
    with torch.no_grad():
        assert module(BATCH).shape == (2, 6, 6)


@pytest.mark.parametrize("need_weights", [True, False])
def test_torch_mha_is_causal_multi_head_attention_either_way_it_is_asked(registry, need_weights):
    spec = registry.get("torch_mha")
    args, kwargs = constructor_kwargs(spec, dict(d_in=8, d_out=8, context_length=10, dropout=0.0, num_heads=4, qkv_bias=True),
                                      {"need_weights": need_weights})
    module = spec.cls(*args, **kwargs).eval()
    randomise(module, seed=5)
    x = torch.rand(3, 10, 8)
    with torch.no_grad():
        torch.testing.assert_close(module(x), sdpa_oracle(x, LAYOUTS["TorchMultiHeadAttention"](module)), atol=1e-5, rtol=1e-4)


def test_torch_mha_refuses_d_in_different_from_d_out_with_a_clear_error(registry):
    with pytest.raises(ValueError, match=r"torch_mha needs d_in == d_out .*got d_in=3, d_out=2"):
        build(registry, "torch_mha", d_in=3, d_out=2, context_length=6, dropout=0.0, num_heads=2, qkv_bias=False)
