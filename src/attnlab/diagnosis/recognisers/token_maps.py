"""A position embedding that maps each token's query and key by the same 2x2 matrix per pair of
coordinates, whatever the token's position means: 2-D and 3-D RoPE over a patch grid (DINOv3,
MLCD, V-JEPA 2), RoPE on the patch tokens only with a class token left as it is. RoPE by the
token's index is `rotation.fit_rotation`'s; this reads what it cannot, one matrix per (token,
pair) fitted on every batch item and head at once: a position's embedding is the same for all of
them, and the keys must take the queries' matrices, so a query from the wrong projection or a key
of the wrong token never fits."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from attnlab.diagnosis.recognisers.recogniser import EPS
from attnlab.diagnosis.recognisers.rotation import _PAIRINGS

_MIN_SAMPLES = 3  # (batch item, head)s of a token: two equations each for the 4 entries of a 2x2 matrix
_IDENTITY = 1e-4  # a matrix this close to the identity leaves its token as it is


@dataclass(frozen=True)
class TokenMaps:
    pairing: str
    maps: torch.Tensor  # (tokens, pairs, 2, 2): the variant's pair = maps @ the reference's pair
    dims: int  # the leading coordinates paired

    def kept(self) -> list[int]:
        """The tokens every pair of which is left as it is (a class token, position 0)."""
        eye = torch.eye(2, dtype=self.maps.dtype)
        return [int(t) for t in torch.nonzero((self.maps - eye).abs().amax((1, 2, 3)) <= _IDENTITY).flatten()]

    def rotations(self) -> bool:
        """Every matrix turns its pair without stretching it (orthogonal, determinant 1)."""
        gram = self.maps.mT @ self.maps  # (tokens, pairs, 2, 2)
        return bool((gram - torch.eye(2, dtype=gram.dtype)).abs().max() <= 1e-3
                    and (torch.linalg.det(self.maps) > 0).all())


def _pairs(x: torch.Tensor, pairing: str) -> torch.Tensor:
    """x (b, h, tokens, d) as (samples, tokens, d/2, 2): each pair's two coordinates last."""
    a, b = _PAIRINGS[pairing](x.shape[-1])
    return torch.stack([x[..., a], x[..., b]], dim=-1).double().flatten(0, 1)


def _bound(ref: torch.Tensor, tol: float) -> float:
    return tol + (1e-5 + 4 * EPS * ref.shape[-2]) * float(ref.abs().max())


def fit_token_maps(mine: torch.Tensor, ref: torch.Tensor, tol: float) -> TokenMaps | None:
    """The matrices M (one per token and pair, the same in every batch item and head) with `mine`'s
    pair = M @ `ref`'s pair, for the first pairing that fits; None if none does, or the maps are
    the same for every token (a scale, not a position) or leave no token as it is."""
    samples = ref.shape[0] * ref.shape[1]
    if ref.dim() != 4 or samples < _MIN_SAMPLES or ref.shape[-1] < 2:
        return None
    for pairing in _PAIRINGS:
        x, y = _pairs(ref, pairing), _pairs(mine, pairing)  # (s, tokens, pairs, 2) each
        gram = torch.einsum("stpi,stpj->tpij", x, x)  # (tokens, pairs, 2, 2)
        cross = torch.einsum("stpi,stpj->tpij", x, y)
        ridge = 1e-12 * gram.diagonal(dim1=-2, dim2=-1).sum(-1).clamp_min(1e-300)[..., None, None]
        maps = torch.linalg.solve(gram + ridge * torch.eye(2, dtype=x.dtype), cross).mT  # (tokens, pairs, 2, 2)
        if float((torch.einsum("tpij,stpj->stpi", maps, x) - y).abs().max()) > _bound(ref, tol):
            continue
        fitted = TokenMaps(pairing, maps, ref.shape[-1] - ref.shape[-1] % 2)
        varies = float((maps - maps[:1]).abs().max()) > 1e-3
        return fitted if varies and fitted.kept() else None
    return None


def maps_fit(maps: TokenMaps, mine: torch.Tensor, ref: torch.Tensor, tol: float) -> bool:
    """Whether `mine` is `ref` mapped by the same matrices (the keys by the queries')."""
    x, y = _pairs(ref, maps.pairing), _pairs(mine, maps.pairing)
    return float((torch.einsum("tpij,stpj->stpi", maps.maps, x) - y).abs().max()) <= _bound(ref, tol)


def mapped(maps: TokenMaps) -> str:
    """What the matrices do, in words."""
    kept = maps.kept()
    shown = ", ".join(str(t) for t in kept[:6]) + (", ..." if len(kept) > 6 else "")
    tokens = f"token{'s' * (len(kept) > 1)} {shown} left as {'they are' if len(kept) > 1 else 'it is'}"
    if maps.rotations():
        return (f"rotated per token over {maps.pairing} by angles that are not a multiple of the token's index "
                f"(RoPE over a grid of patches, 2-D or 3-D, or on some tokens only), {tokens}")
    return (f"mapped per token over {maps.pairing} by 2x2 matrices that are not rotations (a rotary embedding whose "
            f"cos and sin give a pair's two coordinates different frequencies, as V-JEPA 2's does), {tokens}")
