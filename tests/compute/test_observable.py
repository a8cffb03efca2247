"""`@attnlab.variant(observable=...)`: the smallest size at which a variant's change can be seen."""

from __future__ import annotations

from dataclasses import replace

import pytest

from attnlab.compute.memory import Size
from attnlab.compute.observable import unobservable
from attnlab.errors import UserError
from attnlab.modules.registry import get_variant


def test_below_a_declared_size_the_sentence_names_what_is_short_and_what_is_needed():
    rope = replace(get_variant("rope"), observable={"head_dim": 2, "n_tokens": 3})
    assert unobservable(rope, Size(batch=2, heads=2, n_tokens=6, d_in=4, d_out=4)) is None
    assert unobservable(rope, Size(batch=2, heads=2, n_tokens=2, d_in=4, d_out=2)) == (
        "rope's change cannot be observed at this size (head_dim 1, n_tokens 2; it needs head_dim >= 2 and "
        "n_tokens >= 3): not diagnosed")
    projection = replace(get_variant("d_in_projection"), observable={"|d_in - d_out|": 1})
    assert unobservable(projection, Size(batch=1, heads=1, n_tokens=6, d_in=4, d_out=4)) is not None
    assert unobservable(projection, Size(batch=1, heads=1, n_tokens=6, d_in=3, d_out=4)) is None


def test_an_unknown_measure_is_a_one_line_error_naming_the_allowed_ones():
    odd = replace(get_variant("rope"), observable={"heads": 2})
    with pytest.raises(UserError, match=r"declares observable=\['heads'\]: allowed are n_tokens, head_dim"):
        unobservable(odd, Size(batch=1, heads=1, n_tokens=6, d_in=4, d_out=4))
