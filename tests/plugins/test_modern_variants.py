"""The built-in modern variants run against the source's MultiHeadAttention and are named
by their finding: rotary, position_bias, window, softcap, qk_norm, kv_heads; sdpa and
flex_attention compute the reference's numbers; linear_attention is the one built-in with an error,
not_softmax, saying what its weights are.

The expected numbers come from the plugins' parameters (theta, window, cap) and the published
ALiBi slopes, never from attnlab.
"""

from __future__ import annotations

import textwrap

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import attnlab

SIZES = dict(num_heads=4, d_out=16, inputs="random")
TOKENS = ["inputs.n_tokens=9", "inputs.d_in=5"]

NAMED = {  # variant: (its info finding, top-level keys it needs)
    "gqa": ("kv_heads", {"num_kv_heads": 2}),
    "mqa": ("kv_heads", {"num_kv_heads": 1}),
    "rope": ("rotary", {}),
    "alibi": ("position_bias", {}),
    "sliding_window": ("window", {}),
    "softcap": ("softcap", {}),
    "qk_norm": ("qk_norm", {}),
}
SAME_NUMBERS = ["sdpa", "flex_attention"]
# The scaling and mask checks do not yet stand down for a recognised change.
def run(name: str, *overrides: str, **keys):
    result = attnlab.run(name, overrides=[*TOKENS, *overrides], **{**SIZES, **keys})
    assert result.record.status == "ok", result.record.error
    assert result.record.reference.name == "multi_head_attention"
    return result


def codes(result, severity: str) -> list[str]:
    return [f.code for f in result.findings if f.severity == severity]


def message(result, code: str) -> str:
    return next(f.message for f in result.findings if f.code == code)


@pytest.mark.parametrize("name", sorted(NAMED))
def test_each_builtin_variant_is_named_by_its_info_finding(name):
    code, keys = NAMED[name]
    assert code in codes(run(name, **keys), "info")


@pytest.mark.parametrize("name", sorted([*NAMED, *SAME_NUMBERS]))
def test_no_builtin_variant_but_linear_attention_has_an_error_finding(name):
    keys = NAMED[name][1] if name in NAMED else {}
    assert codes(run(name, **keys), "error") == []


@pytest.mark.parametrize("name", SAME_NUMBERS)
def test_sdpa_and_flex_attention_compute_the_reference_numbers_from_reconstructed_weights(name):
    result = run(name)
    assert result.findings == [] and result.first_divergent_stage is None
    assert {"scores", "scaled_scores", "weights"} <= set(result.record.reconstructed_stages)
    assert result.record.missing_stages == []


def test_linear_attention_is_not_softmax_with_its_kernel_named():
    result = run("linear_attention")
    assert codes(result, "error") == ["not_softmax"]
    assert "phi = elu + 1, a non-negative kernel, normalised to sum 1 per row" in message(result, "not_softmax")
    assert {"scores", "scaled_scores", "weights"} <= set(result.record.missing_stages)


@pytest.mark.parametrize("name, param, words", [
    ("rope", "theta=500000", "theta (base) 500000"),
    ("sliding_window", "window=2", "a sliding window of 2: each query sees the last 2 keys, itself included (token 8 sees 7, 8)"),
    ("softcap", "cap=2", "2.0 * tanh(s / 2.0)"),
])
def test_the_finding_reports_the_variants_parameter(name, param, words):
    assert words in message(run(name, f"variant.params.{param}"), NAMED[name][0])


def test_alibi_reports_the_published_slopes_for_a_head_count_not_a_power_of_two():
    # Press et al.'s slopes for 6 heads: 2^-2, 2^-4, 2^-6, 2^-8 (the 4-head sequence), then 2^-1, 2^-3
    result = run("alibi", num_heads=6, d_out=12)
    text = message(result, "position_bias")
    assert "head 0: 0.25, head 1: 0.0625, head 2: 0.01562, head 3: 0.003906, head 4: 0.5, head 5: 0.125" in text
    assert "the published ALiBi slopes for 6 heads" in text


@pytest.mark.parametrize("name", ["rope", "alibi", "sliding_window"])
@settings(max_examples=4, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(batch=st.integers(1, 2), heads=st.integers(1, 4), half=st.integers(1, 4), tokens=st.integers(4, 16),
       d_in=st.integers(2, 8), seed=st.integers(0, 10_000))
@pytest.mark.slow
def test_the_change_is_named_on_any_size(name, batch, heads, half, tokens, d_in, seed):
    result = attnlab.run(name, seed=seed, num_heads=heads, d_out=heads * 2 * half, batch=batch, inputs="random",
                         overrides=[f"inputs.n_tokens={tokens}", f"inputs.d_in={d_in}"])
    assert result.record.status == "ok", result.record.error
    assert NAMED[name][0] in codes(result, "info")
    assert "rotary_misapplied" not in codes(result, "error")


@pytest.mark.slow
def test_flex_attention_with_an_alibi_score_mod_is_a_position_bias(tmp_path, use_plugins):
    """An independent FlexAttention module: its score_mod is read into the scaled scores."""
    (tmp_path / "flex_alibi.py").write_text(textwrap.dedent('''
        import torch
        import torch.nn as nn
        from torch.nn.attention.flex_attention import create_block_mask, flex_attention

        class FlexALiBi(nn.Module):
            def __init__(self, d_in, d_out, context_length, dropout, num_heads, qkv_bias=False):
                super().__init__()
                self.h, self.dh = num_heads, d_out // num_heads
                self.qkv = nn.Linear(d_in, 3 * d_out, bias=qkv_bias)
                self.proj = nn.Linear(d_out, d_out)
                self.register_buffer("slopes", torch.tensor([2.0 ** (-8 * (h + 1) / num_heads) for h in range(num_heads)]))

            @torch.no_grad()
            def forward(self, x):
                b, n, _ = x.shape
                q, k, v = self.qkv(x).view(b, n, 3, self.h, self.dh).permute(2, 0, 3, 1, 4)
                slopes = self.slopes

                def alibi(score, b, h, q_idx, kv_idx):
                    return score - slopes[h] * (q_idx - kv_idx)

                mask = create_block_mask(lambda b, h, q_idx, kv_idx: q_idx >= kv_idx, None, None, n, n, device=x.device)
                o = flex_attention(q, k, v, score_mod=alibi, block_mask=mask)
                return self.proj(o.transpose(1, 2).reshape(b, n, -1))
    '''))
    use_plugins(tmp_path)
    result = run("flex_alibi")
    assert "scaled_scores" in result.record.reconstructed_stages
    assert "the published ALiBi slopes for 4 heads" in message(result, "position_bias")


def test_gqa_left_at_its_default_groups_the_heads_in_pairs():
    assert attnlab.create_variant("gqa", 5, 16, num_heads=4).num_kv_heads == 2


def test_mqa_without_num_kv_heads_shares_the_reference_keys_and_values():
    loaded = run("mqa").record.weights_loaded
    assert loaded["W_key.weight"].startswith("shared") and loaded["W_value.weight"].startswith("shared")


@pytest.mark.slow
@pytest.mark.parametrize("name, code", [("rope", "rotary"), ("flex_attention", None)])
def test_through_the_cli(app, name, code):
    done = app(f"variant={name}", "num_heads=4", "d_out=16")
    assert done.returncode == 0, done.stderr
    record = done.record
    assert record["reference"] == "multi_head_attention"
    found = [f["code"] for f in record["findings"]]
    assert found == ([code] if code else [])
    if code:
        assert code in done.stdout
