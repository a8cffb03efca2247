"""The checks Hydra's types cannot make: an unknown key named with the closest known one."""

from __future__ import annotations

import pytest

from attnlab.app.config_checks import check_given, closest_key
from attnlab.app.config_store import register_configs
from attnlab.errors import UserError


def test_a_top_level_key_under_variant_params_is_named_with_or_without_plus():
    """Without `+` the message was the generic "not a default param"."""
    for plus in ("", "+"):
        assert closest_key("variant.params.qkv_bias", ["variant=linear", f"{plus}variant.params.qkv_bias=true"]) == (
            "variant.params.qkv_bias: qkv_bias is a top-level key; use qkv_bias=true")
    assert closest_key("variant.params.n_kv_heads", ["variant=gqa", "variant.params.n_kv_heads=1"]) == (
        "variant.params.n_kv_heads: n_kv_heads is the top-level key num_kv_heads; use num_kv_heads=1")


@pytest.mark.slow
def test_a_key_of_another_group_is_named_by_its_full_name():
    """The run's header prints `n_tokens=6 d_in=3`; typed back as such they are inputs' keys."""
    register_configs()  # as the CLI has before it names the closest key
    assert closest_key("d_in", ["inputs=random", "d_in=4"]) == "d_in: unknown key; did you mean 'inputs.d_in'?"
    # the book's inputs have neither key: the inputs that have it are named with it
    assert closest_key("n_tokens", ["n_tokens=9"]) == "n_tokens: unknown key; did you mean 'inputs.n_tokens=9' (with inputs=random)?"
    assert closest_key("d_in", ["d_in=4"]) == "d_in: unknown key; did you mean 'inputs.d_in=4' (with inputs=ids|random|text)?"


@pytest.mark.slow
def test_a_misspelt_top_level_key_is_named_before_composing_as_after():
    """check_given runs before the plugins are imported; where it speaks, it says what the composed
    config's check says, and it leaves to that check every key whose closest match may be nested."""
    register_configs()  # closest_key composes the config, as the CLI does
    for args in (["n_sedes=2"], ["num_head=4"], ["variant=unscaled", "sed=4"]):
        key = args[-1].split("=")[0]
        with pytest.raises(UserError) as early:
            check_given(args)
        assert str(early.value) == closest_key(key, args)
    for arg in ("d_in=4", "hed=2", "experiment=x", "+n_sedes=3", "show.haed=1", "hydra=1"):
        check_given([arg])
