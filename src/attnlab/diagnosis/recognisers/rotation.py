"""Fitting a rotation by position (RoPE) between two query or key stages, and saying it in words.

RoPE turns pair i by theta ** (-2i / d) radians per token: at the large bases real models use the
last pairs turn so little over a few tokens that float32 cannot tell them from unturned.
So the frequencies are read as a geometric sequence fitted on the pairs that do show their angle,
and a pair is only taken as passed through (a partial RoPE) when that sequence says it would have
turned visibly."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass

import torch

from attnlab.diagnosis.message_format import fmt
from attnlab.diagnosis.recognisers.recogniser import EPS

_PAIRINGS: dict[str, Callable[[int], tuple[torch.Tensor, torch.Tensor]]] = {
    # (x_i, x_{i + head_dim/2}), as Llama and GPT-NeoX rotate
    "half-split pairs (Llama)": lambda d: (torch.arange(d // 2), torch.arange(d // 2, d)),
    # (x_{2i}, x_{2i+1}), as RoFormer and GPT-J rotate
    "interleaved pairs (RoFormer)": lambda d: (torch.arange(0, d, 2), torch.arange(1, d, 2)),
}


_MIN_FOLLOWING = 3  # pairs on one geometric sequence before its base is named: two pairs fit any base


@dataclass(frozen=True)
class Rotation:
    pairing: str
    frequencies: torch.Tensor  # (dims // 2,) radians per token, one per pair
    dims: int  # the leading coordinates turned: head_dim, or fewer for a partial RoPE
    base: float | None = None  # theta of frequency_i = theta ** (-2i / dims), when the leading pairs follow it
    following: int = 0  # the leading pairs that turn by theta ** (-2i / dims): all of them unless rescaled
    scale: float = 1.0  # every turned vector's length over the reference's: cos and sin scaled (longrope, YaRN)
    normed: bool = False  # fitted on the reference normalised first (QK-norm, then RoPE)


@dataclass(frozen=True)
class _Turn:
    """One pairing's complex coordinates and the per-pair frequencies fitted freely."""

    z_ref: torch.Tensor  # (samples, tokens, d/2) the reference's pairs
    z: torch.Tensor  # (samples, tokens, d/2) the variant's, divided by the scale
    frequency: torch.Tensor  # (d/2,) radians per token
    scale: float
    bound: float  # how far a pair turned by its frequency may land from the variant's

    def errors(self, frequency: torch.Tensor, pairs: slice = slice(None)) -> torch.Tensor:
        """Each of `pairs`' largest distance from the variant's when turned by `frequency`, (pairs,)."""
        positions = torch.arange(self.z.shape[-2], dtype=torch.float64)[:, None]  # (tokens, 1)
        return (self.z_ref[..., pairs] * torch.exp(1j * positions * frequency) - self.z[..., pairs]).abs().amax((0, 1))


def _turned_dims(mine: torch.Tensor, ref: torch.Tensor, tol: float) -> int:
    """How many leading coordinates differ at all: those after them are passed through (or turn too
    slowly to show), so a RoPE turns at least this many."""
    same = ((mine.double() - ref.double()).abs() <= tol).flatten(0, -2).all(dim=0)  # (head_dim,)
    return ref.shape[-1] - int(same.flip(0).int().cumprod(0).sum())


def _scale(x: torch.Tensor, y: torch.Tensor, tol: float) -> float | None:
    """The one factor every vector of `y` is as long as the same vector of `x` times (1 for a plain
    rotation), or None when the lengths do not share one."""
    nx, ny = x.norm(dim=-1), y.norm(dim=-1)  # (samples, tokens)
    slack = tol * math.sqrt(x.shape[-1])
    if (nx - ny).abs().max() <= slack:
        return 1.0
    scale = float((nx * ny).sum() / (nx * nx).sum().clamp_min(1e-300))
    return scale if scale > 0 and (ny - scale * nx).abs().max() <= slack else None


def _free_fit(x: torch.Tensor, y: torch.Tensor, pairing: str, tol: float) -> _Turn | None:
    """Each pair's frequency fitted on its own, when `y` is `x` (samples, tokens, d) turned pair by
    pair in proportion to the position (and scaled by one factor)."""
    scale = _scale(x, y, tol)
    if scale is None:
        return None
    n = x.shape[-2]
    positions = torch.arange(n, dtype=torch.float64)[:, None]  # (tokens, 1)
    a, b = _PAIRINGS[pairing](x.shape[-1])
    z_ref, z = torch.complex(x[..., a], x[..., b]), torch.complex(y[..., a], y[..., b]) / scale  # (s, tokens, d/2)
    turn = z * z_ref.conj()  # |z_ref|^2 * e^(i angle)
    step = turn[:, 1:] * turn[:, :-1].conj()  # the angle gained from one token to the next
    weight = step.abs().flatten(0, 1)  # (samples, d/2): small vectors carry little angle information
    frequency = (weight * step.angle().flatten(0, 1)).sum(0) / weight.sum(0).clamp_min(1e-300)  # (d/2,)
    # one refinement over all positions: the residual angle, wrapped, fitted through the origin
    residual = torch.angle(turn * torch.exp(-1j * positions * frequency))  # (s, tokens, d/2)
    w = turn.abs()
    frequency = frequency + (w * positions * residual).sum((0, 1)) / (w * positions**2).sum((0, 1)).clamp_min(1e-300)
    rtol = 1e-5 + 4 * EPS * n  # a float32 angle t * frequency carries t * eps of rounding
    fitted = _Turn(z_ref, z, frequency, scale, (tol + rtol * float(x.abs().max())) / scale)
    turning = float(frequency.abs().max()) > rtol  # no angle at all is no rotation (QK-norm alone)
    return fitted if turning and float(fitted.errors(frequency).max()) <= fitted.bound else None


def _geometric(turn: _Turn, d: int) -> tuple[float | None, int, torch.Tensor]:
    """The base theta whose sequence +-theta ** (-2i / d) the most leading pairs follow, fitted in
    log space on the pairs whose angle shows (a pair turning below float32's rounding follows any
    base), with that count and the frequencies it gives."""
    pairs = turn.frequency.numel()
    i = torch.arange(pairs, dtype=torch.float64)
    sign = 1.0 if float(turn.frequency[0]) >= 0 else -1.0  # pair 0 turns by +-1 radian per token
    if pairs < 2:
        return None, 0, turn.frequency
    positions = torch.arange(turn.z.shape[-2], dtype=torch.float64)[:, None]  # (tokens, 1)
    # the precision of log|frequency|: the angle's lever (|z_ref| * position) squared, times frequency^2
    precision = (turn.z_ref.abs() ** 2 * positions**2).sum((0, 1)) * turn.frequency**2  # (d/2,)
    log_f = torch.log(turn.frequency.abs().clamp_min(1e-300))

    def log_ratio(k: int) -> float:  # fitted through the origin on pairs 1 to k - 1
        w = precision[1:k] * i[1:k]
        return float((w * log_f[1:k]).sum() / (w * i[1:k]).sum().clamp_min(1e-300))

    def follow(k: int, which: slice) -> bool:  # the pairs `which` on the sequence fitted on pairs 1 to k - 1
        return float(turn.errors(sign * torch.exp(log_ratio(k) * i[which]), which).max()) <= turn.bound

    # each pair checked as it joins (one pair at a time keeps long inputs cheap), then all of them once
    following = next((k for k in range(2, pairs) if not follow(k + 1, slice(k, k + 1))), pairs)
    while following >= 2 and not follow(following, slice(following)):
        following -= 1
    if following < min(_MIN_FOLLOWING, pairs):
        return None, following, turn.frequency
    best = log_ratio(following)
    modelled = torch.cat([sign * torch.exp(best * i[:following]), turn.frequency[following:]])
    return math.exp(-best * d / 2), following, modelled


def fit_rotation(mine: torch.Tensor, ref: torch.Tensor, tol: float) -> Rotation | None:
    """Whether `mine` is `ref` (batch, heads, tokens, head_dim) with every pair of coordinates of
    token t turned by t * frequency (one frequency per pair), perhaps all scaled by one factor: the
    per-token norms keep their ratio and the angle grows linearly with the position. Trailing
    coordinates passed through are a partial RoPE, when RoPE's sequence says they would have turned."""
    head_dim, n = ref.shape[-1], ref.shape[-2]
    least = _turned_dims(mine, ref, tol)
    if least == 0 or n < 2:
        return None
    x, y = ref.double().reshape(-1, n, head_dim), mine.double().reshape(-1, n, head_dim)  # (samples, tokens, hd)
    fallback: Rotation | None = None
    for d in range(head_dim - head_dim % 2, max(least, 2) - 1, -2):  # the widest first: full before partial
        for pairing in _PAIRINGS:
            turn = _free_fit(x[..., :d], y[..., :d], pairing, tol)
            if turn is None:
                continue
            base, following, frequencies = _geometric(turn, d)
            rotation = Rotation(pairing, frequencies, d, base, following, turn.scale)
            if following == d // 2:
                return rotation
            if fallback is None or following > fallback.following:
                fallback = rotation
    return fallback


def reversed_turn(rotation: Rotation) -> Rotation:
    """The same rotation seen from the other side: the reference turned, the variant not."""
    return dataclasses.replace(rotation, frequencies=-rotation.frequencies, scale=1 / rotation.scale)


def _base(rotation: Rotation, head_dim: int) -> str:
    """The base b of frequency_i = b ** (-2i / d), d the coordinates turned, in words."""
    freq, d, k = rotation.frequencies, rotation.dims, rotation.following
    if freq.numel() < 2:
        return "one pair per head (head_dim 2), so no base can be fitted"
    over = "head_dim" if d == head_dim else str(d)
    if rotation.base is None:
        shown = ", ".join(fmt(float(f)) for f in freq[:4])
        return f"frequencies {shown}{', ...' if freq.numel() > 4 else ''} radians per token, not base ** (-2i / {over})"
    words = f"theta (base) {fmt(rotation.base)}: pair i turns by theta ** (-2i / {over}) radians per token"
    if k == freq.numel():
        return words
    shown = ", ".join(fmt(float(f)) for f in freq[k:k + 4])
    return (f"{words} for the first {k} of its {freq.numel()} pairs; pairs {k} to {freq.numel() - 1} turn by {shown}"
            f"{', ...' if freq.numel() > k + 4 else ''} instead (rescaled frequencies, as rope_scaling's llama3, "
            f"YaRN and longrope types rescale the slow pairs)")


def turned(rotation: Rotation, head_dim: int) -> str:
    """How the rotation turns, in words, a partial RoPE and scaled cos and sin named as such."""
    what = f"rotated by position over {rotation.pairing}, {_base(rotation, head_dim)}"
    if rotation.scale != 1:
        what = (f"{what}, with cos and sin multiplied by {fmt(rotation.scale)} (an attention factor, as "
                f"rope_scaling's longrope and YaRN types apply: every turned vector is that many times as long)")
    if rotation.dims == head_dim:
        return what
    return (f"{what}, over the first {rotation.dims} of their {head_dim} coordinates (a partial RoPE: the other "
            f"{head_dim - rotation.dims} pass through unturned)")
