"""Fitting a rotation by position (RoPE) between two query or key stages, and saying it in words."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import torch

from attnlab.diagnosis.recognisers.shared import EPS
from attnlab.diagnosis.words import fmt


_PAIRINGS: dict[str, Callable[[int], tuple[torch.Tensor, torch.Tensor]]] = {
    # (x_i, x_{i + head_dim/2}), as Llama and GPT-NeoX rotate
    "half-split pairs (Llama)": lambda d: (torch.arange(d // 2), torch.arange(d // 2, d)),
    # (x_{2i}, x_{2i+1}), as RoFormer and GPT-J rotate
    "interleaved pairs (RoFormer)": lambda d: (torch.arange(0, d, 2), torch.arange(1, d, 2)),
}


@dataclass(frozen=True)
class Rotation:
    pairing: str
    frequencies: torch.Tensor  # (dims // 2,) radians per token, one per pair
    dims: int  # the leading coordinates turned: head_dim, or fewer for a partial RoPE


def _turned_dims(mine: torch.Tensor, ref: torch.Tensor, tol: float) -> int:
    """How many leading coordinates are not passed through: a partial RoPE (GPT-NeoX, Phi,
    StableLM) turns the first ones and leaves the trailing ones as they were."""
    same = ((mine.double() - ref.double()).abs() <= tol).flatten(0, -2).all(dim=0)  # (head_dim,)
    return ref.shape[-1] - int(same.flip(0).int().cumprod(0).sum())


def fit_rotation(mine: torch.Tensor, ref: torch.Tensor, tol: float) -> Rotation | None:
    """Whether `mine` is `ref` (batch, heads, tokens, head_dim) with every pair of coordinates of
    token t turned by t * frequency (one frequency per pair): the per-token norms are kept and the
    angle grows linearly with the position. Trailing coordinates passed through are a partial RoPE."""
    d = _turned_dims(mine, ref, tol)
    mine, ref = mine[..., :d], ref[..., :d]
    n = ref.shape[-2]
    if d == 0 or d % 2 or n < 2:
        return None
    x, y = ref.double(), mine.double()
    if (x.norm(dim=-1) - y.norm(dim=-1)).abs().max() > tol * math.sqrt(d):
        return None
    positions = torch.arange(n, dtype=torch.float64)[:, None]  # (tokens, 1)
    rtol = 1e-5 + 4 * EPS * n  # a float32 angle t * frequency carries t * eps of rounding
    for pairing, indices in _PAIRINGS.items():
        a, b = indices(d)
        z_ref, z = torch.complex(x[..., a], x[..., b]), torch.complex(y[..., a], y[..., b])  # (b, h, tokens, d/2)
        turn = z * z_ref.conj()  # |z_ref|^2 * e^(i angle)
        step = turn[..., 1:, :] * turn[..., :-1, :].conj()  # the angle gained from one token to the next
        weight = step.abs().flatten(0, 2)  # (samples, d/2): small vectors carry little angle information
        frequency = (weight * step.angle().flatten(0, 2)).sum(0) / weight.sum(0).clamp_min(1e-300)  # (d/2,)
        # one refinement over all positions: the residual angle, wrapped, fitted through the origin
        residual = torch.angle(turn * torch.exp(-1j * positions * frequency))  # (b, h, tokens, d/2)
        w = turn.abs()
        frequency = frequency + ((w * positions * residual).sum((0, 1, 2))
                                 / (w * positions**2).sum((0, 1, 2)).clamp_min(1e-300))
        rotated = z_ref * torch.exp(1j * positions * frequency)
        turning = float(frequency.abs().max()) > rtol  # no angle at all is no rotation (QK-norm alone)
        if turning and (rotated - z).abs().max() <= tol + rtol * float(x.abs().max()):
            return Rotation(pairing, frequency, d)
    return None


def _base(rotation: Rotation, head_dim: int) -> str:
    """The base b of frequency_i = b ** (-2i / d), d the coordinates turned, fitted in log space, in words."""
    freq, d = rotation.frequencies, rotation.dims
    if freq.numel() < 2:
        return "one pair per head (head_dim 2), so no base can be fitted"
    over = "head_dim" if d == head_dim else str(d)
    i = torch.arange(freq.numel(), dtype=torch.float64)
    exponent = 2 * i[1:] / d
    log_freq = torch.log(freq[1:].abs().clamp_min(1e-300))
    log_base = -float((exponent * log_freq).sum() / (exponent**2).sum())
    fitted = torch.exp(-log_base * 2 * i / d)
    if (fitted - freq).abs().max() > 1e-3 * float(freq.abs().max()) or abs(float(freq[0]) - 1) > 1e-3:
        shown = ", ".join(fmt(float(f)) for f in freq[:4])
        return f"frequencies {shown}{', ...' if freq.numel() > 4 else ''} radians per token, not base ** (-2i / {over})"
    return f"theta (base) {fmt(math.exp(log_base))}: pair i turns by theta ** (-2i / {over}) radians per token"


def turned(rotation: Rotation, head_dim: int) -> str:
    """How the rotation turns, in words, a partial RoPE named as one."""
    what = f"rotated by position over {rotation.pairing}, {_base(rotation, head_dim)}"
    if rotation.dims == head_dim:
        return what
    return (f"{what}, over the first {rotation.dims} of their {head_dim} coordinates (a partial RoPE: the other "
            f"{head_dim - rotation.dims} pass through unturned)")
