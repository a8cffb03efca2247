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
