"""The checks Hydra's types cannot make: an unknown key named with the closest known one."""

from __future__ import annotations

from attnlab.app.config_checks import closest_key


def test_a_top_level_key_under_variant_params_is_named_with_or_without_plus():
    """Without `+` the message was the generic "not a default param"."""
    for plus in ("", "+"):
        assert closest_key("variant.params.qkv_bias", ["variant=linear", f"{plus}variant.params.qkv_bias=true"]) == (
            "variant.params.qkv_bias: qkv_bias is a top-level key; use qkv_bias=true")
    assert closest_key("variant.params.n_kv_heads", ["variant=gqa", "variant.params.n_kv_heads=1"]) == (
        "variant.params.n_kv_heads: n_kv_heads is the top-level key num_kv_heads; use num_kv_heads=1")
