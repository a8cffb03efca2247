"""Head patterns on weights built by hand: one head per pattern, and one that is none of them."""

from __future__ import annotations

import numpy as np

from attnlab.model.head_patterns import head_patterns


def causal_uniform(n: int) -> np.ndarray:
    w = np.tril(np.ones((n, n)))
    return w / w.sum(axis=-1, keepdims=True)  # (n, n)


def test_each_pattern_is_named_for_its_head_only() -> None:
    n = 8
    previous = np.eye(n, k=-1)
    previous[0, 0] = 1.0  # row 0 can only see itself
    first = np.zeros((n, n))
    first[:, 0] = 1.0
    rng = np.random.default_rng(0)
    peaked = np.tril(rng.random((n, n)) ** 8)  # mass on a few random keys
    peaked /= peaked.sum(axis=-1, keepdims=True)
    weights = np.stack([previous, first, causal_uniform(n), peaked])[None]  # (1, 4, n, n)
    found = {f.code: f.heads for f in head_patterns(weights)}
    assert found == {"previous_token_head": [0], "first_token_head": [1], "uniform_head": [2]}
    assert all(f.severity == "info" and f.stage == "weights" for f in head_patterns(weights))


def test_two_tokens_are_too_few_to_say() -> None:
    assert head_patterns(causal_uniform(2)[None, None]) == []


def test_an_even_spread_is_entropy_1_causal_or_not() -> None:
    """An encoder's rows see every key: divided by the causal row's log(i+1), ViT's heads read 1.56."""
    from attnlab.model.head_patterns import head_scores

    n = 17
    encoder = np.full((n, n), 1.0 / n)  # (n, n): every query spreads evenly over all keys
    rng = np.random.default_rng(1)
    peaked = rng.random((n, n)) ** 8
    peaked /= peaked.sum(axis=-1, keepdims=True)
    scores = head_scores(np.stack([encoder, causal_uniform(n), peaked]))["uniform_head"]  # (3,)
    np.testing.assert_allclose(scores[:2], [1.0, 1.0], rtol=1e-6)
    assert 0 < scores[2] < 0.95
    message = next(f.message for f in head_patterns(encoder[None, None]) if f.code == "uniform_head")
    assert "head 0 (1.00)" in message and "on these inputs" in message


def test_each_rows_entropy_and_keys_with_weight_as_numpy_sums_them_in_float64() -> None:
    """_row_entropy (einsum casting to float64 as it goes) against float64 copies multiplied and
    summed, and the keys of positive weight counted; the room it is given may hold anything (here NaN)."""
    from attnlab.model.head_patterns import _row_entropy

    rng = np.random.default_rng(0)
    w = np.tril(rng.random((300, 300))).astype(np.float32)
    w /= w.sum(axis=-1, keepdims=True)
    entropy, support = _row_entropy(w, np.full(w.shape, np.nan, dtype=np.float32))
    logs = np.log(np.where(w > 0, w, 1.0).astype(np.float32)).astype(np.float64)
    np.testing.assert_allclose(entropy, -(w.astype(np.float64) * logs).sum(axis=-1), rtol=1e-12)
    np.testing.assert_array_equal(support, np.arange(1, 301))
