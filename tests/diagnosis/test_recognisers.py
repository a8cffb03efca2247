"""attnlab.diagnosis.recognisers on implementations written here, independently of the built-in plugins:
each deliberate change is named with its parameter, and the same change applied wrongly is an
error, never the info finding.

The modules below differ from the built-ins on purpose: RoPE over interleaved pairs through complex
numbers (RoFormer / Meta's Llama code), ALiBi as an additive mask to F.scaled_dot_product_attention,
a window as SDPA's boolean mask, soft-capping Gemma-style with the queries pre-scaled, QK-norm on a
fused qkv projection, linear attention as a loop over tokens. Their parameters are the constructor's
(variant.params), so one module serves its correct and its broken form.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
import torch

import attnlab
from attnlab.capture.recorder import capture
from attnlab.diagnosis.analysis import analyse
from attnlab.diagnosis.recognisers.latent import shared_key_columns

HEADER = """
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

import attnlab
"""

PLUGINS = {
    "roformer": '''
class RoFormerAttention(nn.Module):
    """Interleaved pairs (x_2i, x_2i+1) turned as complex numbers by position * theta ** (-2i / d)."""

    def __init__(self, d_in, d_out, context_length, dropout, num_heads, qkv_bias=False, theta=500000.0,
                 rotate_keys=True, rotate_values=False):
        super().__init__()
        self.h, self.dh = num_heads, d_out // num_heads
        self.q_proj = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.k_proj = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.v_proj = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.o_proj = nn.Linear(d_out, d_out)
        freqs = theta ** (-torch.arange(0, self.dh, 2).double() / self.dh)
        self.register_buffer("angles", torch.outer(torch.arange(context_length).double(), freqs).float())
        self.rotate_keys, self.rotate_values = rotate_keys, rotate_values

    def rotate(self, x):  # (b, n, h, dh)
        angles = self.angles[: x.shape[1], None, :]
        z = torch.view_as_complex(x.reshape(*x.shape[:-1], -1, 2).contiguous())  # (b, n, h, dh/2)
        return torch.view_as_real(z * torch.polar(torch.ones_like(angles), angles)).flatten(3)

    def forward(self, x):
        b, n, _ = x.shape
        q = self.rotate(self.q_proj(x).view(b, n, self.h, self.dh))
        k = self.k_proj(x).view(b, n, self.h, self.dh)
        v = self.v_proj(x).view(b, n, self.h, self.dh)
        k = self.rotate(k) if self.rotate_keys else k
        v = self.rotate(v) if self.rotate_values else v
        s = torch.einsum("bqhd,bkhd->bhqk", q, k) / math.sqrt(self.dh)
        s = s.masked_fill(torch.ones(n, n, dtype=torch.bool).triu(1), float("-inf"))
        o = torch.einsum("bhqk,bkhd->bqhd", s.softmax(dim=-1), v)
        return self.o_proj(o.reshape(b, n, -1))
''',
    "llama_rope": '''
class LlamaAttention(nn.Module):
    """Meta's Llama: a complex freqs_cis buffer (torch.polar), queries and keys turned through
    view_as_complex over interleaved pairs, causal SDPA."""

    def __init__(self, d_in, d_out, context_length, dropout, num_heads, qkv_bias=False, theta=10000.0):
        super().__init__()
        self.h, self.dh = num_heads, d_out // num_heads
        self.wq = nn.Linear(d_in, d_out, bias=False)
        self.wk = nn.Linear(d_in, d_out, bias=False)
        self.wv = nn.Linear(d_in, d_out, bias=False)
        self.wo = nn.Linear(d_out, d_out, bias=False)
        freqs = 1.0 / (theta ** (torch.arange(0, self.dh, 2)[: self.dh // 2].float() / self.dh))
        angles = torch.outer(torch.arange(context_length).float(), freqs)  # (n, dh/2)
        self.register_buffer("freqs_cis", torch.polar(torch.ones_like(angles), angles), persistent=False)

    def rotate(self, x):  # (b, n, h, dh)
        z = torch.view_as_complex(x.float().reshape(*x.shape[:-1], -1, 2))
        return torch.view_as_real(z * self.freqs_cis[: x.shape[1], None, :]).flatten(3).type_as(x)

    def forward(self, x):
        b, n, _ = x.shape
        q = self.rotate(self.wq(x).view(b, n, self.h, self.dh)).transpose(1, 2)
        k = self.rotate(self.wk(x).view(b, n, self.h, self.dh)).transpose(1, 2)
        v = self.wv(x).view(b, n, self.h, self.dh).transpose(1, 2)
        o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.wo(o.transpose(1, 2).reshape(b, n, -1))
''',
    "qk_norm_rope": '''
class QKNormRoPE(nn.Module):
    """OLMo 2 / Qwen3 style: queries and keys RMS-normalised per head, then rotated over half-split pairs."""

    def __init__(self, d_in, d_out, context_length, dropout, num_heads, qkv_bias=False, theta=1000.0):
        super().__init__()
        self.h, self.dh = num_heads, d_out // num_heads
        self.qkv = nn.Linear(d_in, 3 * d_out, bias=qkv_bias)
        self.out = nn.Linear(d_out, d_out)
        inv = theta ** (-torch.arange(0, self.dh, 2).float() / self.dh)
        angles = torch.outer(torch.arange(context_length).float(), inv)  # (n, dh/2)
        self.register_buffer("cos", angles.cos().repeat(1, 2))
        self.register_buffer("sin", angles.sin().repeat(1, 2))

    def rope(self, x):  # (b, h, n, dh)
        n, half = x.shape[-2], self.dh // 2
        rotated = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
        return x * self.cos[:n] + rotated * self.sin[:n]

    def forward(self, x):
        b, n, _ = x.shape
        q, k, v = self.qkv(x).view(b, n, 3, self.h, self.dh).permute(2, 0, 3, 1, 4)
        q = self.rope(q * torch.rsqrt(q.pow(2).mean(-1, keepdim=True) + 1e-6))
        k = self.rope(k * torch.rsqrt(k.pow(2).mean(-1, keepdim=True) + 1e-6))
        o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.out(o.transpose(1, 2).reshape(b, n, -1))
''',
    "sdpa_alibi": '''
class SDPAALiBi(nn.Module):
    """ALiBi as SDPA's float mask on a fused qkv; `by_key`: the bias from the key's position alone
    (a bug: far keys gain); `as_bloom`: slope * key position, as Bloom and Falcon write it (the same
    weights as ALiBi: it differs by a constant per row)."""

    def __init__(self, d_in, d_out, context_length, dropout, num_heads, qkv_bias=False, by_key=False, as_bloom=False):
        super().__init__()
        self.h, self.dh = num_heads, d_out // num_heads
        self.qkv = nn.Linear(d_in, 3 * d_out, bias=qkv_bias)
        self.proj = nn.Linear(d_out, d_out)
        self.slopes = [2 ** (-8 * (h + 1) / num_heads) for h in range(num_heads)]
        self.by_key, self.as_bloom = by_key, as_bloom

    def forward(self, x):
        b, n, _ = x.shape
        q, k, v = self.qkv(x).view(b, n, 3, self.h, self.dh).permute(2, 0, 3, 1, 4)
        i = torch.arange(n)
        gap = (i[None, :] if self.by_key else -i[None, :] if self.as_bloom else i[:, None] - i[None, :]).float().expand(n, n)
        bias = -torch.tensor(self.slopes)[:, None, None] * gap
        bias = bias.masked_fill(i[None, :] > i[:, None], float("-inf"))
        o = F.scaled_dot_product_attention(q, k, v, attn_mask=bias)
        return self.proj(o.transpose(1, 2).reshape(b, n, -1))
''',
    "sdpa_window": '''
class SDPAWindow(nn.Module):
    """A band of `window` keys as SDPA's boolean mask; `hide_self`: the band starts one key early (a bug)."""

    def __init__(self, d_in, d_out, context_length, dropout, num_heads, qkv_bias=False, window=4, hide_self=False):
        super().__init__()
        self.h, self.dh = num_heads, d_out // num_heads
        self.W_query = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_key = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_value = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.out_proj = nn.Linear(d_out, d_out)
        self.window, self.hide_self = window, hide_self

    def forward(self, x):
        b, n, _ = x.shape
        split = lambda t: t.view(b, n, self.h, self.dh).transpose(1, 2)
        q, k, v = split(self.W_query(x)), split(self.W_key(x)), split(self.W_value(x))
        gap = torch.arange(n)[:, None] - torch.arange(n)[None, :]
        keep = (gap >= int(self.hide_self)) & (gap < self.window)
        o = F.scaled_dot_product_attention(q, k, v, attn_mask=keep)
        return self.out_proj(o.transpose(1, 2).reshape(b, n, -1))
''',
    "gemma_softcap": '''
class GemmaSoftCap(nn.Module):
    """Queries pre-scaled, logits capped by cap * tanh(logits / cap), an additive causal mask;
    `after_mask`: the cap applied to the masked logits (the mask's -inf becomes -cap)."""

    def __init__(self, d_in, d_out, context_length, dropout, num_heads, qkv_bias=False, cap=3.0, after_mask=False):
        super().__init__()
        self.h, self.dh = num_heads, d_out // num_heads
        self.Wqkv = nn.Linear(d_in, 3 * d_out, bias=qkv_bias)
        self.out = nn.Linear(d_out, d_out)
        self.cap, self.after_mask = cap, after_mask

    def forward(self, x):
        b, n, _ = x.shape
        q, k, v = (t.transpose(1, 2) for t in self.Wqkv(x).view(b, n, 3, self.h, self.dh).unbind(2))
        logits = (q * self.dh ** -0.5) @ k.transpose(-1, -2)
        causal = torch.full((n, n), float("-inf")).triu(1)
        if self.after_mask:
            logits = torch.tanh((logits + causal) / self.cap) * self.cap
        else:
            logits = torch.tanh(logits / self.cap) * self.cap + causal
        o = F.softmax(logits, dim=-1) @ v
        return self.out(o.transpose(1, 2).reshape(b, n, -1))
''',
    "fused_qk_norm": '''
class FusedQKNorm(nn.Module):
    """nanoGPT-style fused qkv, queries and keys divided by their RMS per head, SDPA causal."""

    def __init__(self, d_in, d_out, context_length, dropout, num_heads, qkv_bias=False):
        super().__init__()
        self.h = num_heads
        self.c_attn = nn.Linear(d_in, 3 * d_out, bias=qkv_bias)
        self.c_proj = nn.Linear(d_out, d_out)

    def forward(self, x):
        b, n, c = x.shape
        q, k, v = self.c_attn(x).split(self.c_attn.out_features // 3, dim=2)
        q, k, v = (t.view(b, n, self.h, -1).transpose(1, 2) for t in (q, k, v))
        q = q * torch.rsqrt(q.pow(2).mean(-1, keepdim=True) + 1e-6)
        k = k * torch.rsqrt(k.pow(2).mean(-1, keepdim=True) + 1e-6)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.c_proj(y.transpose(1, 2).reshape(b, n, -1))
''',
    "recurrent_linear": '''
class RecurrentLinearAttention(nn.Module):
    """Linear attention as a recurrence over the tokens: a state sum_j phi(k_j) v_j^T and a normaliser."""

    def __init__(self, d_in, d_out, context_length, dropout, num_heads, qkv_bias=False, feature="elu", normalise=True):
        super().__init__()
        self.h, self.dh = num_heads, d_out // num_heads
        self.Wq, self.Wk, self.Wv, self.Wo = (nn.Parameter(torch.randn(d_in if i < 3 else d_out, d_out) / d_out ** 0.5)
                                              for i in range(4))  # used as x @ W
        self.phi = (lambda t: F.elu(t) + 1) if feature == "elu" else (lambda t: t)
        self.normalise = normalise

    def forward(self, x):
        b, n, _ = x.shape
        split = lambda t: t.view(b, n, self.h, self.dh).transpose(1, 2)
        q = attnlab.tap("queries", split(x @ self.Wq))
        k = attnlab.tap("keys", split(x @ self.Wk))
        v = attnlab.tap("values", split(x @ self.Wv))
        state = torch.zeros(b, self.h, self.dh, self.dh)
        norm = torch.zeros(b, self.h, self.dh)
        rows = []
        for t in range(n):
            fk, fq = self.phi(k[:, :, t]), self.phi(q[:, :, t])
            state = state + fk.unsqueeze(-1) * v[:, :, t].unsqueeze(-2)
            norm = norm + fk
            row = (fq.unsqueeze(-1) * state).sum(dim=-2)  # phi(q_t) @ state, written out
            rows.append(row / (fq * norm).sum(-1, keepdim=True) if self.normalise else row)
        context = attnlab.tap("context", torch.stack(rows, dim=2))
        return context.transpose(1, 2).reshape(b, n, -1) @ self.Wo
''',
}

SIZES = dict(num_heads=4, d_out=16, inputs="random")
TOKENS = ["inputs.n_tokens=10", "inputs.d_in=5"]


@pytest.fixture
def independent(tmp_path: Path, use_plugins):
    folder = tmp_path / "independent"
    folder.mkdir()
    for name, body in PLUGINS.items():
        (folder / f"{name}.py").write_text(HEADER + textwrap.dedent(body))
    use_plugins(folder)

    def run(name: str, *params: str, seed: int = 0):
        result = attnlab.run(name, seed=seed, overrides=[*TOKENS, *(f"+variant.params.{p}" for p in params)], **SIZES)
        assert result.record.status == "ok", result.record.error
        assert result.record.reference.name == "multi_head_attention"
        return result

    return run


def codes(result, severity: str | None = None) -> list[str]:
    return [f.code for f in result.findings if severity is None or f.severity == severity]


def message(result, code: str) -> str:
    return next(f.message for f in result.findings if f.code == code)


# -- the change, named with its parameter --------------------------------------------------------------


@pytest.mark.slow
def test_rope_over_interleaved_complex_pairs_is_rotary_with_its_theta(independent):
    result = independent("roformer")
    assert "rotary" in codes(result, "info") and codes(result, "error") == []
    assert "interleaved pairs" in message(result, "rotary")
    assert "theta (base) 500000" in message(result, "rotary")


@pytest.mark.slow
def test_llamas_complex_freqs_cis_buffer_survives_and_is_rotary(independent):
    """A complex buffer kept through the harness' cast (Module.to(float32) drops its imaginary part)."""
    result = independent("llama_rope")
    assert "rotary" in codes(result, "info") and codes(result, "error") == []
    assert "theta (base) 10000" in message(result, "rotary")


def test_qk_norm_then_rope_is_both_changes_named(independent):
    result = independent("qk_norm_rope")
    assert {"rotary", "qk_norm"} <= set(codes(result, "info")) and codes(result, "error") == []
    assert "half-split pairs (Llama), theta (base) 1000" in message(result, "rotary")


def test_alibi_as_an_sdpa_float_mask_is_a_position_bias_with_the_published_slopes(independent):
    result = independent("sdpa_alibi")
    assert "position_bias" in codes(result, "info")
    text = message(result, "position_bias")
    assert "head 0: 0.25, head 1: 0.0625, head 2: 0.01562, head 3: 0.003906" in text
    assert "the published ALiBi slopes for 4 heads" in text


@pytest.mark.parametrize("window", [1, 4])
def test_a_band_mask_for_sdpa_is_a_window_of_its_width(independent, window):
    result = independent("sdpa_window", f"window={window}")
    assert "window" in codes(result, "info")
    seen = ", ".join(str(t) for t in range(10 - window, 10))
    assert f"a sliding window of {window}: " in message(result, "window")
    assert f"(token 9 sees {seen})" in message(result, "window")


def test_gemma_style_soft_capping_with_prescaled_queries_reports_its_cap(independent):
    result = independent("gemma_softcap", "cap=1.5")
    assert "softcap" in codes(result, "info")
    assert "1.5 * tanh(s / 1.5)" in message(result, "softcap")


def test_rms_normalised_queries_and_keys_on_a_fused_projection_are_qk_norm(independent):
    result = independent("fused_qk_norm")
    assert codes(result) == ["qk_norm"]


@pytest.mark.parametrize("feature, normalise, words", [
    ("elu", True, ["phi = elu + 1, a non-negative kernel", "normalised to sum 1 per row"]),
    ("identity", False, ["phi = the identity", "not normalised"]),
])
def test_recurrent_linear_attention_is_not_softmax_saying_what_its_weights_are(independent, feature, normalise, words):
    result = independent("recurrent_linear", f"feature={feature}", f"normalise={normalise}")
    assert codes(result, "error") == ["not_softmax"]
    assert all(w in message(result, "not_softmax") for w in words)


# -- the same change applied wrongly is an error -----------------------------------------------------------


def test_rope_on_the_values_too_is_an_error_at_the_values(independent):
    result = independent("roformer", "rotate_values=true")
    assert "rotary" not in codes(result)
    assert [(f.code, f.stage) for f in result.findings if f.severity == "error"][0] == ("rotary_misapplied", "values")


def test_rope_on_the_queries_only_is_an_error_at_the_keys(independent):
    result = independent("roformer", "rotate_keys=false")
    assert "rotary" not in codes(result)
    assert ("rotary_misapplied", "keys") in [(f.code, f.stage) for f in result.findings if f.severity == "error"]
    assert "but the keys are not" in message(result, "rotary_misapplied")


def test_alibi_written_from_the_key_position_as_bloom_does_is_alibi(independent):
    result = independent("sdpa_alibi", "as_bloom=true")
    assert codes(result) == ["position_bias"], [f.message for f in result.findings]
    assert "the published ALiBi slopes for 4 heads" in message(result, "position_bias")


def test_a_bias_from_the_key_position_alone_is_no_position_bias(independent):
    result = independent("sdpa_alibi", "by_key=true")
    assert "position_bias" not in codes(result)
    assert codes(result, "error")


def test_a_window_that_hides_the_query_itself_is_an_error(independent):
    result = independent("sdpa_window", "hide_self=true")
    assert "window" not in codes(result)
    assert codes(result, "error")


def test_soft_capping_after_the_mask_is_not_softcap(independent):
    result = independent("gemma_softcap", "cap=1.5", "after_mask=true")
    assert "softcap" not in codes(result)
    assert codes(result, "error")


# -- the diagnosis of captures directly ---------------------------------------------------------------------


def _findings(variant: torch.nn.Module, reference: torch.nn.Module, x: torch.Tensor) -> list:
    """The findings of `variant` against `reference` on `x`, their weights shared, as a run diagnoses them."""
    return analyse(capture(variant.eval(), x), capture(reference.eval(), x), weights_shared=True).findings


def test_a_module_against_itself_is_nothing_to_recognise():
    torch.manual_seed(0)
    module = attnlab.create_variant("multi_head_attention", 5, 8, num_heads=2, context_length=7)
    assert _findings(module, module, torch.randn(2, 7, 5)) == []


def test_rotated_queries_and_keys_with_other_norms_are_not_rotary():
    """A rotation keeps each token's norm: queries that are rotated and also rescaled are not RoPE."""
    torch.manual_seed(0)
    reference = attnlab.create_variant("multi_head_attention", 5, 8, num_heads=2, context_length=7)
    variant = attnlab.create_variant("rope", 5, 8, num_heads=2, context_length=7)
    variant.load_state_dict(reference.state_dict(), strict=False)
    with torch.no_grad():
        variant.W_query.weight.mul_(1.5)
    found = _findings(variant, reference, torch.randn(2, 7, 5))
    assert "rotary" not in [f.code for f in found]


RECOGNISED = {"rotary", "rotary_misapplied", "position_bias", "window", "softcap", "qk_norm"}
CORRECT = ["bonus_pytorch_mha", "einsum_mha", "nanogpt_block", "nn_mha_need_weights", "qkvo_proj", "sdpa_bool_mask",
           "sdpa", "flex_attention", "causal_attention", "mha_wrapper"]


@pytest.mark.parametrize("name", CORRECT)
@pytest.mark.slow
def test_correct_implementations_are_never_a_deliberate_change(use_plugins, name):
    use_plugins(Path(__file__).resolve().parents[1] / "implementations")
    result = attnlab.run(name, num_heads=4, d_out=16, inputs="random", overrides=["inputs.n_tokens=9", "inputs.d_in=16"])
    assert result.record.status == "ok", result.record.error
    assert RECOGNISED.isdisjoint(codes(result)) and "not_softmax" not in codes(result)


def test_deepseek_latent_attention_is_named_not_a_projection_width():
    """DeepseekV3Attention (MLA) at its config's head sizes: named as latent attention with the
    widths its config declares, no shape_projection; the shared columns are the class's own k_rot."""
    transformers = pytest.importorskip("transformers", reason="the Hugging Face class is the independent side")
    config = transformers.DeepseekV3Config()
    result = attnlab.run("hf:deepseek_v3", overrides=["inputs=random", "inputs.n_tokens=8", "inputs.d_in=64",
                                                      "d_out=64", "num_heads=4"])
    assert [f.code for f in result.findings] == ["latent_attention"]
    (note,) = result.findings
    assert note.severity == "info"
    qk = config.qk_nope_head_dim + config.qk_rope_head_dim
    assert f"the same {config.qk_rope_head_dim} rotary columns" in note.message
    assert f"have {qk} columns per head, the values {config.v_head_dim}" in note.message
    from transformers.models.deepseek_v3.modeling_deepseek_v3 import DeepseekV3Attention

    module = DeepseekV3Attention(transformers.DeepseekV3Config(hidden_size=64, num_attention_heads=4), layer_idx=0)
    with torch.no_grad():  # the class's own keys, built its way from the latent and the rotary key
        latent, k_rot = module.kv_a_proj_with_mqa(torch.randn(1, 8, 64)).split(
            [config.kv_lora_rank, config.qk_rope_head_dim], dim=-1)
        keys, _ = module.expand_kv(module.kv_a_layernorm(latent)[:, None], k_rot[:, None])  # (1, heads, t, qk)
    assert shared_key_columns(keys) == config.qk_rope_head_dim


def test_latent_attention_against_its_own_class_is_nothing_to_recognise():
    pytest.importorskip("transformers", reason="the Hugging Face class is the reference")
    result = attnlab.run("hf:deepseek_v3", overrides=["inputs=random", "inputs.n_tokens=8", "inputs.d_in=64",
                                                      "d_out=64", "num_heads=4", "attn_implementation=sdpa",
                                                      "reference=hf:deepseek_v3", "weights=native"])
    assert result.findings == []


def test_keys_shared_whole_or_not_at_all_are_no_latent():
    kv = torch.randn(2, 1, 5, 8)  # (b, kv_heads, t, hs)
    assert shared_key_columns(kv.repeat_interleave(4, dim=1)) == 0  # one key/value head: multi-query attention
    assert shared_key_columns(torch.randn(2, 4, 5, 8)) == 0
    rope = torch.cat([torch.randn(2, 4, 5, 6), kv[..., :2].expand(2, 4, 5, 2)], dim=-1)  # (b, h, t, 6 + 2)
    assert shared_key_columns(rope) == 2
