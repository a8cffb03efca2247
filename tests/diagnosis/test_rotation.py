"""RoPE read at the bases real models use: fit_rotation on queries turned here by hand, and real
transformers attention classes built from their configs, each base checked against the one given
or the config's own.

At a base of 1e6 the last pairs of a head turn by about 1e-6 radians over 8 tokens, below float32's
rounding: the fit must read them as RoPE's geometric sequence continued, not as coordinates passed
through, and still find a partial RoPE whose trailing coordinates would have turned visibly.
"""

from __future__ import annotations

import math
import re

import pytest
import torch

import attnlab
from attnlab.diagnosis.recognisers.positions import rotary
from attnlab.diagnosis.recognisers.recogniser import EPS
from attnlab.diagnosis.recognisers.rotation import fit_rotation

D_IN = 64  # the queries below stand for x @ W_query over this many inputs
N_TOKENS = 8


def _tolerance(queries: torch.Tensor) -> float:
    """What the rotary recogniser allows a float32 query projected from D_IN inputs: four times a
    projection's rounding, 4 eps (d_in + 1) of its peak, plus 1e-6."""
    return 4 * (4 * EPS * (D_IN + 1) * float(queries.abs().max()) + 1e-6)


def _inverse_frequencies(base: float, dims: int) -> torch.Tensor:
    return 1.0 / base ** (torch.arange(0, dims, 2, dtype=torch.float64) / dims)  # (dims/2,)


def _rotated(x: torch.Tensor, inv_freq: torch.Tensor, interleaved: bool, scale: float = 1.0) -> torch.Tensor:
    """x (b, h, tokens, head_dim) with its first 2 * len(inv_freq) coordinates turned as RoFormer
    (interleaved) or GPT-NeoX (half-split) write it in float32, cos and sin times `scale`; the rest
    passed through."""
    dims = 2 * inv_freq.numel()
    angles = (torch.arange(x.shape[-2], dtype=torch.float64)[:, None] * inv_freq).float()  # (tokens, dims/2)
    cos, sin = angles.cos() * scale, angles.sin() * scale
    turned, passed = x[..., :dims], x[..., dims:]
    if interleaved:
        a, b = turned[..., 0::2], turned[..., 1::2]  # (b, h, tokens, dims/2)
        out = torch.stack([a * cos - b * sin, b * cos + a * sin], dim=-1).flatten(-2)
    else:
        a, b = turned[..., : dims // 2], turned[..., dims // 2:]
        out = torch.cat([a * cos - b * sin, b * cos + a * sin], dim=-1)
    return torch.cat([out, passed], dim=-1)


def _queries(head_dim: int) -> torch.Tensor:
    torch.manual_seed(0)
    return torch.randn(2, 4, N_TOKENS, head_dim)  # (b, h, tokens, head_dim)


PAIRINGS = {False: "half-split pairs (Llama)", True: "interleaved pairs (RoFormer)"}


@pytest.mark.parametrize("interleaved", [False, True])
@pytest.mark.parametrize("head_dim", [16, 64])
@pytest.mark.parametrize("base", [1e4, 5e5, 1e6, 1e7])
def test_a_full_rope_at_any_base_is_read_with_its_base(base, head_dim, interleaved):
    x = _queries(head_dim)
    rotation = fit_rotation(_rotated(x, _inverse_frequencies(base, head_dim), interleaved), x, _tolerance(x))
    assert rotation is not None
    assert (rotation.pairing, rotation.dims, rotation.scale) == (PAIRINGS[interleaved], head_dim, 1.0)
    assert rotation.following == head_dim // 2
    assert rotation.base == pytest.approx(base, rel=0.01)


@pytest.mark.parametrize("interleaved, dims", [(False, 4), (True, 8)])
def test_a_truly_partial_rope_is_partial(interleaved, dims):
    """Trailing coordinates passed through where RoPE's sequence continued would have turned them
    visibly: a partial RoPE over the coordinates that turn, with its own base."""
    head_dim, base = 16, 1e4
    x = _queries(head_dim)
    tol = _tolerance(x)
    inv_freq = _inverse_frequencies(base, dims)
    # the first pair past the turned ones, had the sequence gone on, moves a token's pair this far
    next_frequency = float(inv_freq[-1] ** 2 / inv_freq[-2])
    assert (N_TOKENS - 1) * next_frequency * float(x.abs().max()) > tol  # decidable at these tokens
    rotation = fit_rotation(_rotated(x, inv_freq, interleaved), x, tol)
    assert rotation is not None and (rotation.pairing, rotation.dims) == (PAIRINGS[interleaved], dims)
    assert rotation.base == pytest.approx(base, rel=0.01)


@pytest.mark.parametrize("interleaved", [False, True])
def test_cos_and_sin_scaled_by_one_factor_are_rope_times_that_factor(interleaved):
    x = _queries(16)
    rotation = fit_rotation(_rotated(x, _inverse_frequencies(1e6, 16), interleaved, scale=1.2), x, _tolerance(x))
    assert rotation is not None and rotation.dims == 16
    assert rotation.scale == pytest.approx(1.2, rel=1e-4)
    assert rotation.base == pytest.approx(1e6, rel=0.01)


def test_a_different_scale_per_token_is_no_rotation():
    x = _queries(16)
    turned = _rotated(x, _inverse_frequencies(1e4, 16), interleaved=False)
    per_token = torch.linspace(1.0, 1.5, N_TOKENS)[:, None]  # (tokens, 1)
    assert fit_rotation(turned * per_token, x, _tolerance(x)) is None


def _llama3_frequencies(base: float, head_dim: int, factor: float = 8.0, low: float = 1.0, high: float = 4.0,
                        original: int = 8192) -> torch.Tensor:
    """Llama 3.1's apply_scaling (Meta's reference code): long wavelengths slowed by `factor`, short
    ones kept, a smooth blend between."""
    inv_freq = _inverse_frequencies(base, head_dim)
    wavelength = 2 * math.pi / inv_freq
    smooth = (original / wavelength - low) / (high - low)
    blended = (1 - smooth) * inv_freq / factor + smooth * inv_freq
    kept = torch.where(wavelength > original / low, inv_freq / factor, blended)
    return torch.where(wavelength < original / high, inv_freq, kept)


def test_llama3_rescaled_slow_pairs_keep_the_base_of_the_fast_ones():
    head_dim, base = 64, 5e5
    x = _queries(head_dim)
    inv_freq = _llama3_frequencies(base, head_dim)
    kept = int((inv_freq == _inverse_frequencies(base, head_dim)).sum())  # the pairs apply_scaling left alone
    rotation = fit_rotation(_rotated(x, inv_freq, interleaved=False), x, _tolerance(x))
    assert rotation is not None and rotation.dims == head_dim
    assert rotation.base == pytest.approx(base, rel=0.01)
    assert kept <= rotation.following < head_dim // 2


class _Stages:
    """The three things the rotary recogniser asks of a variant-reference pair, over given stages:
    each stage's (variant, reference), whether it changed, its tolerance (the recogniser allows 4x)."""

    def __init__(self, **stages: tuple[torch.Tensor, torch.Tensor]):
        self.stages = stages

    def both(self, stage: str) -> tuple[torch.Tensor, torch.Tensor] | None:
        return self.stages.get(stage)

    def changed(self, stage: str) -> bool:
        return not torch.equal(*self.stages[stage])

    def tolerance(self, stage: str) -> float:
        return _tolerance(self.stages[stage][1]) / 4


def test_queries_and_keys_that_alone_disagree_on_a_partial_rope_are_one_rope():
    """At a base of 3e4 over 8 of 16 coordinates the first pair left unturned would have turned by
    about the rounding: the queries alone may read it as passed through and the keys alone as slowly
    turning. Fitted together they are one rotation, never a rope misapplied to the keys."""
    inv_freq = _inverse_frequencies(3e4, 8)
    disagreeing = 0
    for seed in range(40):
        torch.manual_seed(seed)
        q, k = torch.randn(2, 4, N_TOKENS, 16), torch.randn(2, 4, N_TOKENS, 16)
        pair = _Stages(queries=(_rotated(q, inv_freq, True), q), keys=(_rotated(k, inv_freq, True), k))
        alone = [fit_rotation(*pair.both(stage), 4 * pair.tolerance(stage)).dims for stage in ("queries", "keys")]
        disagreeing += alone[0] != alone[1]
        (found,) = rotary.run.__wrapped__(pair)  # the recogniser itself, under its check
        assert found.code == "rotary" and "interleaved pairs" in found.message
    assert disagreeing  # the case arises at these seeds


# -- transformers' own classes, built from their configs --------------------------------------------------

transformers = pytest.importorskip("transformers")

SIZES = ["inputs=random", f"inputs.n_tokens={N_TOKENS}", "inputs.d_in=64", "d_out=64"]
HEADS = {16: "num_heads=4", 64: "num_heads=1"}  # head_dim at d_out 64


def _rope(**parameters) -> str:
    return "variant.params.rope_parameters={" + ",".join(f"{k}:{v}" for k, v in parameters.items()) + "}"


def _rotary(name: str, *overrides: str):
    result = attnlab.run(f"hf:{name}", overrides=[*SIZES, *overrides])
    assert result.record.status == "ok", result.record.error
    assert [(f.code, f.stage) for f in result.findings if f.severity == "error"] == []
    (rotary,) = [f for f in result.findings if f.code == "rotary"]
    assert rotary.severity == "info"
    return rotary.message


def _base(message: str) -> float:
    return float(re.search(r"theta \(base\) ([0-9.e+]+)", message).group(1))


def _theta(config) -> float:
    return config.rope_parameters["rope_theta"]


CASES = {
    "llama theta 500000, head_dim 16": ("llama", 500000.0, [HEADS[16], _rope(rope_type="default", rope_theta=500000)]),
    "llama theta 500000, head_dim 64": ("llama", 500000.0, [HEADS[64], _rope(rope_type="default", rope_theta=500000)]),
    "mixtral": ("mixtral", _theta(transformers.MixtralConfig()), [HEADS[16]]),
    # layer 0 of ModernBERT attends globally, at its full_attention base
    "modernbert": ("modernbert", transformers.ModernBertConfig().rope_parameters["full_attention"]["rope_theta"],
                   [HEADS[16]]),
    "cohere (interleaved)": ("cohere", _theta(transformers.CohereConfig()), [HEADS[16]]),
    "gpt_neox (partial)": ("gpt_neox", _theta(transformers.GPTNeoXConfig()), [HEADS[16]]),
}


@pytest.mark.parametrize("implementation", ["eager", "sdpa"])
@pytest.mark.parametrize("case", CASES)
def test_a_models_rope_is_read_at_its_configs_base(case, implementation):
    name, theta, overrides = CASES[case]
    message = _rotary(name, *overrides, f"attn_implementation={implementation}")
    assert _base(message) == pytest.approx(theta, rel=0.01)


def test_cohere_turns_interleaved_pairs_over_the_whole_head():
    message = _rotary("cohere", HEADS[16])
    assert "interleaved pairs" in message and "partial" not in message


def test_gpt_neox_rotary_pct_is_a_partial_rope_over_its_coordinates():
    turned = int(16 * transformers.GPTNeoXConfig().rope_parameters["partial_rotary_factor"])  # rotary_pct 0.25
    message = _rotary("gpt_neox", HEADS[16])
    assert f"over the first {turned} of their 16 coordinates" in message


def test_phi3_longrope_is_rope_with_its_attention_factor():
    """longrope multiplies cos and sin by sqrt(1 + ln(max / original) / ln(original)) when the
    context is longer than the one trained on."""
    longest, original = 4096, 1024
    factor = math.sqrt(1 + math.log(longest / original) / math.log(original))
    message = _rotary("phi3", HEADS[16], f"context_length={longest}",
                      f"variant.params.original_max_position_embeddings={original}",
                      _rope(rope_type="longrope", rope_theta=10000, short_factor=[1.0] * 8,
                            long_factor=[float(i) for i in range(1, 9)]))
    assert _base(message) == pytest.approx(10000, rel=0.01)
    shown = float(re.search(r"cos and sin multiplied by ([0-9.]+)", message).group(1))
    assert shown == pytest.approx(factor, rel=1e-3)


@pytest.mark.slow
def test_llama3_rope_scaling_keeps_the_base_of_its_unscaled_pairs():
    message = _rotary("llama", HEADS[64], "context_length=32768",
                      _rope(rope_type="llama3", rope_theta=500000, factor=8.0, low_freq_factor=1.0,
                            high_freq_factor=4.0, original_max_position_embeddings=8192))
    assert _base(message) == pytest.approx(500000, rel=0.01)
    assert "rescaled frequencies" in message


@pytest.mark.slow
def test_yarn_is_rope_with_its_attention_factor_and_the_base_of_its_unscaled_pairs():
    """YaRN multiplies cos and sin by 0.1 ln(factor) + 1 and slows the pairs whose wavelength is
    long against the original context; the fast ones keep the base."""
    factor = 4.0
    message = _rotary("llama", HEADS[64], "context_length=16384",
                      _rope(rope_type="yarn", rope_theta=1000000, factor=factor, original_max_position_embeddings=4096))
    assert _base(message) == pytest.approx(1e6, rel=0.01)
    shown = float(re.search(r"cos and sin multiplied by ([0-9.]+)", message).group(1))
    assert shown == pytest.approx(0.1 * math.log(factor) + 1, rel=1e-3)
