"""RoPE whose angles are not a multiple of the token's index, read as one 2x2 matrix per token and
pair: 2-D RoPE over a grid of patches with a class token left unrotated (DINOv3's), and a rotary
whose cos and sin give a pair's two coordinates different frequencies (V-JEPA 2's). The queries
and keys are turned here by hand, in plain torch; a key of the wrong token or a scale on every
token is not such a map."""

from __future__ import annotations

import torch

from attnlab.diagnosis.recognisers.norms import token_maps_maybe_normed
from attnlab.diagnosis.recognisers.token_maps import fit_token_maps, mapped, maps_fit

TOL = 1e-5


def _grid_angles(tokens: int, pairs: int) -> torch.Tensor:
    """2-D RoPE's angles (tokens, pairs): token 0 a class token (no angle), the others on a grid of
    rows and columns, half the pairs turned by the row, half by the column."""
    cells = torch.arange(tokens - 1)
    rows, cols = (cells // 3).double(), (cells % 3).double()
    freq = 1.0 / 100 ** (torch.arange(pairs // 2, dtype=torch.float64) / (pairs // 2))  # (pairs / 2,)
    angles = torch.cat([rows[:, None] * freq, cols[:, None] * freq], dim=-1)  # (tokens - 1, pairs)
    return torch.cat([torch.zeros(1, pairs, dtype=torch.float64), angles])


def _half_split(x: torch.Tensor, angles: torch.Tensor) -> torch.Tensor:
    """x (b, h, tokens, d) with pair (x_i, x_{i + d/2}) turned by angles[t, i]."""
    half = x.shape[-1] // 2
    a, b = x[..., :half], x[..., half:]
    cos, sin = angles.cos().float(), angles.sin().float()
    return torch.cat([a * cos - b * sin, b * cos + a * sin], dim=-1)


def _vjepa(x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
    """V-JEPA 2's rotate_queries_or_keys, written out: cos and sin repeated (not interleaved) over
    interleaved pairs, so x_{2i} and x_{2i+1} see the frequencies of coordinates 2i and 2i + 1."""
    d = x.shape[-1]
    omega = 1.0 / 10000 ** (torch.arange(d // 2, dtype=torch.float32) / (d / 2))  # (d/2,)
    freq = positions[:, None].float() * omega  # (tokens, d/2)
    cos, sin = freq.cos().repeat(1, 2), freq.sin().repeat(1, 2)  # (tokens, d)
    y = torch.stack((-x[..., 1::2], x[..., 0::2]), dim=-1).flatten(-2)
    return x * cos + y * sin


def _qk(seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(2, 4, 8, 16, generator=g), torch.randn(2, 4, 8, 16, generator=g)  # (b, h, tokens, hs)


def test_2d_rope_with_an_unrotated_class_token_is_one_rotation_per_token_and_pair():
    queries, keys = _qk()
    angles = _grid_angles(8, 8)
    maps = fit_token_maps(_half_split(queries, angles), queries, TOL)
    assert maps is not None and maps.pairing == "half-split pairs (Llama)"
    assert maps.rotations() and maps.kept() == [0, 1]  # the class token and the grid's corner (row 0, column 0)
    turned = torch.atan2(maps.maps[..., 1, 0], maps.maps[..., 0, 0])  # (tokens, pairs)
    assert torch.allclose(turned, angles, atol=1e-5)
    assert maps_fit(maps, _half_split(keys, angles), keys, TOL)
    assert "tokens 0, 1 left as they are" in mapped(maps)


def test_vjepa2s_rotary_is_a_map_per_token_that_is_not_a_rotation():
    queries, keys = _qk(1)
    positions = torch.tensor([0, 1, 2, 3, 0, 1, 2, 3])  # one axis of its 3-D grid
    maps = fit_token_maps(_vjepa(queries, positions), queries, TOL)
    assert maps is not None and maps.pairing == "interleaved pairs (RoFormer)"
    assert not maps.rotations()  # (x0, x1) -> (x0 cos a0 - x1 sin a0, x1 cos a1 + x0 sin a1): not orthogonal
    assert maps_fit(maps, _vjepa(keys, positions), keys, TOL)
    assert "not rotations" in mapped(maps)


def test_keys_of_the_wrong_token_or_a_scale_are_not_a_position_map():
    queries, keys = _qk(2)
    angles = _grid_angles(8, 8)
    maps = fit_token_maps(_half_split(queries, angles), queries, TOL)
    assert maps is not None
    shifted = torch.roll(keys, 1, dims=-2)  # each token's key from the previous token's row
    assert not maps_fit(maps, _half_split(shifted, angles), keys, TOL)
    assert fit_token_maps(2 * queries, queries, TOL) is None  # the same map for every token: a scale, no position
    previous = torch.roll(queries, 1, dims=-2)
    assert fit_token_maps(_half_split(previous, angles), queries, TOL) is None  # no matrix per token maps it


def _rms_normed(x: torch.Tensor) -> torch.Tensor:
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6)  # RMSNorm of each head's vector, weight 1


def test_2d_rope_after_a_qk_norm_is_read_on_the_normalised_reference():
    """Sapiens 2's order: each head's query and key RMS-normalised, then 2-D RoPE on the patches. The
    maps fit only once the reference is normalised alike; keys of the previous token still do not."""
    queries, keys = _qk(3)
    angles = _grid_angles(8, 8)
    mine_q, mine_k = _half_split(_rms_normed(queries), angles), _half_split(_rms_normed(keys), angles)
    assert fit_token_maps(mine_q, queries, TOL) is None  # the norm is per token, batch item and head: no map alone
    maps = token_maps_maybe_normed((mine_q, queries), (mine_k, keys), TOL, TOL)
    assert maps is not None and maps.rotations() and maps.kept() == [0, 1]
    previous = _half_split(_rms_normed(torch.roll(keys, 1, dims=-2)), angles)
    assert token_maps_maybe_normed((mine_q, queries), (previous, keys), TOL, TOL) is None
