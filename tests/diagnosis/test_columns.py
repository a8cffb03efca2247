"""Every diagnostics column a run writes is declared (and so on the reference page); the
declaration's patterns name columns, not arbitrary text."""

from __future__ import annotations

import pytest

import attnlab
from attnlab.diagnosis.columns import declared


@pytest.mark.parametrize("variant, overrides", [
    ("unscaled", []),
    ("multi_head_attention", ["inputs=random", "num_heads=2", "d_out=4"]),
    ("gqa", ["inputs=random", "num_heads=4", "num_kv_heads=2", "d_out=8"]),
    ("linear_attention", ["inputs=random"]),
])
def test_every_column_a_run_writes_is_declared(variant, overrides) -> None:
    result = attnlab.run(variant, overrides=overrides)
    undeclared = [name for name in result.diagnostics if not declared(name)]
    assert undeclared == [], f"declare them in attnlab.diagnosis.columns: {undeclared}"


def test_patterns_match_whole_names_only() -> None:
    assert declared("divergence_scaled_scores") and declared("weights_entropy_mean_h11")
    assert not declared("divergence_") and not declared("weights_entropy_mean_hx") and not declared("scale")
