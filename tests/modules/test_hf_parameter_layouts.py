"""Library attention classes whose parameters are not matrices (attnlab.modules.layouts): XLNet's bare
(width, heads, head_dim) parameters used through einsum, SqueezeBERT's kernel-1 Conv1d projections in
groups, Vocos' (WavTokenizer's) kernel-1 Conv1d over its own width; and ConvBERT's queries in fewer,
narrower heads than asked. Each class is built from its config; what it computes with the reference's
weights is checked in plain torch, and a mistake planted in a copy is still found."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

import attnlab
from tests.modules.hf_runs import SIZES, errors

pytest.importorskip("transformers")

from transformers import ConvBertConfig, SqueezeBertConfig, XLNetConfig  # noqa: E402
from transformers.models.convbert.modeling_convbert import ConvBertSelfAttention  # noqa: E402
from transformers.models.squeezebert.modeling_squeezebert import SqueezeBertSelfAttention  # noqa: E402
from transformers.models.xlnet.modeling_xlnet import XLNetRelativeAttention  # noqa: E402

from attnlab.modules.layouts import align, output_width, read_projections  # noqa: E402
from attnlab.modules.roles import parameter_role  # noqa: E402


class _Reference(nn.Module):
    """A plain multi-head reference: separate Linear query, key, value and output projections."""

    def __init__(self, d: int, out_bias: bool = True) -> None:
        super().__init__()
        self.W_query, self.W_key, self.W_value = (nn.Linear(d, d, bias=False) for _ in range(3))
        self.out_proj = nn.Linear(d, d, bias=out_bias)


def test_xlnet_s_einsum_parameters_take_the_reference_s_heads_and_read_back():
    """q, k, v (d_model, n_head, d_head) used as einsum("ibh,hnd->ibnd"), o as einsum("ibnd,hnd->ibh"):
    with the reference's weights loaded, each projects as the reference's Linear layers do."""
    torch.manual_seed(0)
    xlnet = XLNetRelativeAttention(XLNetConfig(d_model=64, n_head=4, d_head=16))
    reference = _Reference(64)
    report = align(reference, xlnet, num_heads=4)
    assert report["q"].startswith("shared (per head") and report["o"].startswith("shared (per head")
    x = torch.randn(8, 2, 64)  # (num_tokens, b, d_model): XLNet's layout
    with torch.no_grad():
        for param, linear in ((xlnet.q, reference.W_query), (xlnet.k, reference.W_key), (xlnet.v, reference.W_value)):
            heads = torch.einsum("ibh,hnd->ibnd", x, param)  # (T, b, n_head, d_head)
            torch.testing.assert_close(heads.flatten(-2), linear(x))
        context = torch.randn(8, 2, 4, 16)  # (T, b, n_head, d_head)
        out = torch.einsum("ibnd,hnd->ibh", context, xlnet.o)  # (T, b, d_model)
        torch.testing.assert_close(out, context.flatten(-2) @ reference.out_proj.weight.T)  # its bias zeroed
    assert float(reference.out_proj.bias.detach().abs().max()) == 0.0  # the variant has no place for it
    torch.testing.assert_close(read_projections(xlnet, num_heads=4).W_query, reference.W_query.weight.T)


def test_squeezebert_s_grouped_kernel_1_convolutions_take_the_block_diagonal():
    """Conv1d(64, 64, kernel_size=1, groups=4) over (b, channels, tokens): a block-diagonal linear map. It
    takes the reference's four diagonal blocks and the reference keeps only those for the run."""
    torch.manual_seed(0)
    config = SqueezeBertConfig(hidden_size=64, num_attention_heads=4)
    squeeze = SqueezeBertSelfAttention(config, cin=64, q_groups=4, k_groups=4, v_groups=4)
    reference = _Reference(64)
    original = reference.W_query.weight.detach().clone()  # (d_out, d_in)
    report = align(reference, squeeze, num_heads=4)
    assert "4 diagonal blocks kept" in report["reference.W_query.weight"]
    assert report["query.weight"].startswith("shared (kernel-1 convolution")
    blocks = torch.block_diag(*[torch.ones(16, 16)] * 4)
    torch.testing.assert_close(reference.W_query.weight, original * blocks)  # the other blocks zeroed
    x = torch.randn(2, 8, 64)  # (b, num_tokens, d_in)
    with torch.no_grad():
        for conv, linear in ((squeeze.query, reference.W_query), (squeeze.key, reference.W_key)):
            got = conv(x.transpose(1, 2)).transpose(1, 2) - conv.bias  # (b, num_tokens, d_out), its bias zeroed
            torch.testing.assert_close(got, linear(x), atol=1e-6, rtol=1e-5)
    assert float(squeeze.query.bias.detach().abs().max()) == 0.0


def test_an_ungrouped_kernel_1_conv_reads_as_its_matrix_and_names_its_output_width():
    """A Conv1d(d, d, 1) projection (Vocos') is read as the Linear of its (out, in) matrix."""
    torch.manual_seed(0)

    class ConvAttention(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.q, self.k, self.v = (nn.Conv1d(12, 12, kernel_size=1) for _ in range(3))
            self.proj = nn.Conv1d(12, 20, kernel_size=1)

    module = ConvAttention()
    read = read_projections(module, num_heads=1)
    torch.testing.assert_close(read.W_key, module.k.weight[..., 0].T)  # (d_in, d_out)
    torch.testing.assert_close(read.b_value, module.v.bias)
    assert output_width(module) == 20


class SqueezeBertKeysAsQueries(SqueezeBertSelfAttention):
    """Planted: the queries made by the key projection."""

    def __init__(self, config: SqueezeBertConfig, cin: int, q_groups: int = 1, k_groups: int = 1,
                 v_groups: int = 1) -> None:
        super().__init__(config, cin, q_groups, k_groups, v_groups)
        self.query.forward = self.key.forward


class XLNetSoftmaxOverQueries(XLNetRelativeAttention):
    """Planted: the softmax over the queries (dim 2 of its (b, n, i, j) scores), not the keys."""

    def rel_attn_core(self, *args, **kwargs):
        original = nn.functional.softmax
        nn.functional.softmax = lambda t, dim=None, **kw: original(t, 2, **kw)
        try:
            return super().rel_attn_core(*args, **kwargs)
        finally:
            nn.functional.softmax = original


class ConvBertUnscaled(ConvBertSelfAttention):
    """Planted: the scores divided by sqrt(1), not by sqrt(attention_head_size)."""

    def forward(self, *args, **kwargs):
        original = math.sqrt
        math.sqrt = lambda n: 1.0 if n == self.attention_head_size else original(n)
        try:
            return super().forward(*args, **kwargs)
        finally:
            math.sqrt = original


def test_the_planted_mistakes_are_real():
    """Independently of attnlab: each planted copy computes other outputs than its library class."""
    torch.manual_seed(0)
    config = SqueezeBertConfig(hidden_size=64, num_attention_heads=4)
    library = SqueezeBertSelfAttention(config, cin=64, q_groups=4, k_groups=4, v_groups=4).eval()
    planted = SqueezeBertKeysAsQueries(config, 64, 4, 4, 4).eval()
    planted.load_state_dict(library.state_dict())
    x = torch.randn(2, 64, 8)  # (b, channels, tokens)
    with torch.no_grad():
        assert float((planted(x, None, False)["context_layer"] - library(x, None, False)["context_layer"]).abs().max()) > 1e-3
    xconfig = XLNetConfig(d_model=64, n_head=4, d_head=16)
    xlnet, wrong = XLNetRelativeAttention(xconfig).eval(), XLNetSoftmaxOverQueries(xconfig).eval()
    for p in xlnet.parameters():
        nn.init.normal_(p, std=0.2)
    wrong.load_state_dict(xlnet.state_dict())
    q, k, v = (torch.randn(8, 2, 4, 16) for _ in range(3))  # (T, b, n_head, d_head)
    r = torch.randn(16, 2, 4, 16)  # the relative positions' keys, 2 T of them
    with torch.no_grad():
        assert float((wrong.rel_attn_core(q, k, v, r) - xlnet.rel_attn_core(q, k, v, r)).abs().max()) > 1e-3
    cconfig = ConvBertConfig(hidden_size=64, num_attention_heads=4, embedding_size=64)
    convbert, unscaled = ConvBertSelfAttention(cconfig).eval(), ConvBertUnscaled(cconfig).eval()
    unscaled.load_state_dict(convbert.state_dict())
    x = torch.randn(2, 8, 64)  # (b, num_tokens, hidden_size)
    with torch.no_grad():
        assert float((unscaled(x)[0] - convbert(x)[0]).abs().max()) > 1e-3


@pytest.mark.slow
@pytest.mark.parametrize(("model", "declared"), [
    ("xlnet", ("score_terms", "scaled_scores")),  # its relative-position logits by its own `r`, a term
    ("squeezebert", None),  # channels first, grouped kernel-1 convolutions: every stage compared
    ("wavtokenizer", ("not_observable", "queries")),  # a GroupNorm before its projections, 768 wide of its own
    ("convbert", ("not_observable", "output")),  # 2 heads of 16 (head_ratio), its convolution joined to the context
    ("funnel", ("not_observable", "output")),  # pre-scaled queries plus a learned bias; an encoder's file, no mask
])
def test_the_library_class_takes_the_reference_s_weights_and_gives_no_error_finding(model, declared):
    result = attnlab.run(f"hf:{model}", overrides=SIZES)
    assert errors(result) == [], [f.message for f in result.findings]
    shared = [how for name, how in result.record.weights_loaded.items()  # its q, k, v (not ConvBERT's key_conv_...)
              if parameter_role(name) in ("queries", "keys", "values") and not name.endswith("bias")
              and "conv" not in name and not name.startswith("reference.")]
    assert shared and all(how.startswith("shared") for how in shared), result.record.weights_loaded
    if declared:
        assert declared in {(f.code, f.stage) for f in result.findings}, [f.message for f in result.findings]
    if declared is None or declared == ("not_observable", "output"):
        assert result.record.first_divergent_stage in (None, "output")


@pytest.mark.slow
@pytest.mark.parametrize(("planted", "expected"), [
    (SqueezeBertKeysAsQueries, ("query_source", "queries")),
    (XLNetSoftmaxOverQueries, ("softmax_axis", "weights")),
    (ConvBertUnscaled, ("scaling", "scaled_scores")),
])
def test_a_mistake_planted_in_a_copy_is_still_found(planted, expected):
    result = attnlab.run(planted, overrides=SIZES)
    assert expected in errors(result), [f.message for f in result.findings]
