"""Normalised queries and keys (QK-norm): RMSNorm of each head or of the whole projection,
LayerNorm of each head, and a rotation after one."""

from __future__ import annotations

import dataclasses
from typing import NamedTuple

import torch

from attnlab.diagnosis.recognisers.recogniser import UNIT_RMS
from attnlab.diagnosis.recognisers.rotation import Rotation, fit_rotation
from attnlab.diagnosis.recognisers.token_maps import TokenMaps, fit_token_maps, maps_fit


class Norm(NamedTuple):
    """A normalisation of queries or keys: the axes it spans, (b, h, t, hs), and whether it
    subtracts the mean first (LayerNorm) or not (RMSNorm)."""

    span: tuple[int, ...]
    centred: bool


PER_HEAD = Norm((-1,), False)  # RMSNorm of each head's vector: Qwen3, Gemma 3


WHOLE_WIDTH = Norm((1, -1), False)  # RMSNorm of every head's together, before the split: OLMo 2


PER_HEAD_LAYER = Norm((-1,), True)  # LayerNorm of each head's vector: Persimmon


WHOLE_WIDTH_LAYER = Norm((1, -1), True)  # LayerNorm of the whole projection, before the split: ESM C


def norms(x: torch.Tensor) -> tuple[Norm, ...]:
    if x.dim() == 4:
        return (PER_HEAD, WHOLE_WIDTH, PER_HEAD_LAYER, WHOLE_WIDTH_LAYER)
    return (PER_HEAD, PER_HEAD_LAYER)


def _centred(x: torch.Tensor, norm: Norm) -> torch.Tensor:
    x = x.double()
    return x - x.mean(dim=norm.span, keepdim=True) if norm.centred else x


def rms_normed(x: torch.Tensor, eps: float = 0.0, norm: Norm = PER_HEAD) -> tuple[torch.Tensor, float]:
    """x divided per vector by sqrt(mean(x^2) over the norm's span + eps), as RMSNorm does (its
    mean subtracted first for a LayerNorm), and the smallest such divisor."""
    x = _centred(x, norm)
    rms = (x.pow(2).mean(dim=norm.span, keepdim=True) + eps).sqrt().clamp_min(1e-12)
    return x / rms, float(rms.min())


def norm_eps(mine: torch.Tensor, ref: torch.Tensor, norm: Norm = PER_HEAD) -> float:
    """The eps of an RMSNorm x / sqrt(mean(x^2) + eps) that would turn `ref` into `mine`, read off
    the vector with the smallest mean square, where eps shows most (a short query vector of a
    2-wide head comes out visibly below RMS 1); 0 where none shows."""
    ref_ms = _centred(ref, norm).pow(2).mean(dim=norm.span).flatten()
    mine_ms = mine.double().pow(2).mean(dim=norm.span).flatten()
    i = int(ref_ms.argmin())
    if not 0 < float(mine_ms[i]) < 1:
        return 0.0
    return max(float(ref_ms[i] / mine_ms[i] - ref_ms[i]), 0.0)  # mine_ms = ref_ms / (ref_ms + eps)


def rotation_maybe_normed(mine: torch.Tensor, ref: torch.Tensor, tol: float) -> Rotation | None:
    """`fit_rotation` of `ref` itself, or of `ref` RMS-normalised first (QK-norm, then RoPE, as in
    OLMo 2 and Qwen3: a rotation keeps the RMS, so the order does not matter; `normed` says so)."""
    turn = fit_rotation(mine, ref, tol)
    for norm in norms(ref) if turn is None else ():
        # the eps read off the shortest vector, or none: a factor after the norm (nGPT's keys at 1 / sqrt(head_dim))
        # shortens every vector, which that reading would take for eps
        for eps in dict.fromkeys((norm_eps(mine, ref, norm), 0.0)):
            normed, smallest = rms_normed(ref, eps, norm)
            turn = fit_rotation(mine, normed, UNIT_RMS + tol / smallest)
            if turn is not None:
                return dataclasses.replace(turn, normed=True)
    return turn


def token_maps_maybe_normed(queries: tuple[torch.Tensor, torch.Tensor], keys: tuple[torch.Tensor, torch.Tensor],
                            tol: float, keys_tol: float) -> TokenMaps | None:
    """`fit_token_maps` of the queries that the keys fit too, of the reference's own or both normalised
    alike first (QK-norm, then a 2-D RoPE over patches with its class token unrotated, Sapiens 2's): the
    norm's eps read per side as `rotation_maybe_normed` does; `normed` is not kept, the QK-norm check says it."""
    maps = fit_token_maps(*queries, tol)
    if maps is not None:
        return maps if maps_fit(maps, *keys, keys_tol) else None
    for norm in norms(queries[1]):
        (q_normed, q_small), (k_normed, k_small) = (rms_normed(ref, norm_eps(mine, ref, norm), norm)
                                                    for mine, ref in (queries, keys))
        maps = fit_token_maps(queries[0], q_normed, UNIT_RMS + tol / q_small)
        if maps is not None and maps_fit(maps, keys[0], k_normed, UNIT_RMS + keys_tol / k_small):
            return maps
    return None


def unit_rms_of(mine: torch.Tensor, ref: torch.Tensor, tol: float, norm: Norm = PER_HEAD) -> bool:
    """`mine` is `ref` normalised per vector over the norm's span to root-mean-square 1 (then
    perhaps rotated by position: RoPE after QK-norm)."""
    rms = mine.double().pow(2).mean(dim=norm.span).sqrt()
    if (rms - 1).abs().median() > UNIT_RMS or rms.max() > 1 + UNIT_RMS:  # most at 1; a short one below (eps)
        return False
    normed, smallest = rms_normed(ref, norm_eps(mine, ref, norm), norm)
    tol = UNIT_RMS + tol / smallest
    if bool((normed - mine.double()).abs().max() <= tol):
        return True
    # or then RoPE, by the token's index or per token over patches (a 2-D RoPE, a class token left as it is)
    return fit_rotation(mine, normed, tol) is not None or fit_token_maps(mine, normed, tol) is not None
