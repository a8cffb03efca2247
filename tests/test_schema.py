"""The one config schema: every key's default is the config's, and every bad value is one line."""

from __future__ import annotations

import pytest

from attnlab.app.api import compose_config
from attnlab.app.config_paths import config_dir
from attnlab.app.config_values import check_values
from attnlab.errors import UserError
from attnlab.modules.registry import DEFAULT_VALUES
from attnlab.schema import KEYS

BAD = [
    ("qkv_bias=2", "qkv_bias=2: must be true or false"),
    ("train=2", "train=2: must be true or false"),
    ("profile=1", "profile=1: must be true or false"),
    ("d_out=0", "d_out=0: must be a positive integer (1, 2, 3, ...)"),
    ("num_heads=-1", "num_heads=-1: must be a positive integer (1, 2, 3, ...)"),
    ("num_kv_heads=0", "num_kv_heads=0: must be a positive integer (1, 2, 3, ...) or null"),
    ("batch=0", "batch=0: must be a positive integer (1, 2, 3, ...)"),
    ("n_seeds=0", "n_seeds=0: must be a positive integer (1, 2, 3, ...)"),
    ("dropout=1", "dropout=1: must be a number in [0, 1)"),
    ("dropout=-0.1", "dropout=-0.1: must be a number in [0, 1)"),
    ("dropout=nan", "dropout=nan: must be a number in [0, 1)"),
    ("seed=-1", "seed=-1: must be an integer in [0, 18446744073709551615] (torch's seed range)"),
    ("seed=18446744073709551616", "seed=18446744073709551616: must be an integer in [0, 18446744073709551615]"),
    ("seed=1.5", "seed=1.5: must be an integer in [0, 18446744073709551615]"),
    ("profile_budget_s=inf", "profile_budget_s=inf: must be a number of seconds in (0, 3600]"),
    ("profile_budget_s=1e12", "profile_budget_s=1000000000000.0: must be a number of seconds in (0, 3600]"),
    ("profile_budget_s=0", "profile_budget_s=0: must be a number of seconds in (0, 3600]"),
    ("timeout_s=-1", "timeout_s=-1: must be a number of seconds in (0, inf] or null"),
    ("show.head=-1", "show.head=-1: must be an integer >= 0"),
    ("dtype=float8", "dtype=float8: allowed are float32, float64, bfloat16, float16"),
    ("device=tpu", "device=tpu: allowed are cpu, cuda, mps, auto"),
    ("context_length=5", "context_length=5: must be at least the inputs' 6 tokens"),
]


@pytest.mark.parametrize("override,message", BAD, ids=[o for o, _ in BAD])
def test_a_bad_value_is_refused_whether_or_not_the_variant_uses_it(override, message) -> None:
    cfg = compose_config("reference", 123, [override])  # the reference takes no num_heads, dropout, qkv_bias
    with pytest.raises(UserError) as caught:
        check_values(cfg)
    assert str(caught.value).startswith(message)


@pytest.mark.parametrize("overrides,message", [
    (["num_heads=4", "num_kv_heads=3"], "num_kv_heads=3: must divide num_heads=4"),
    (["seed=18446744073709551615", "n_seeds=2"], "n_seeds=2: seed+n_seeds-1 must stay within torch's seed range"),
    (["inputs=random", "inputs.n_tokens=9", "context_length=8"], "context_length=8: must be at least the inputs' 9 tokens"),
])
def test_keys_that_constrain_each_other_are_checked_together(overrides, message) -> None:
    with pytest.raises(UserError, match=message.replace("+", r"\+")):
        check_values(compose_config("reference", 1, overrides))


def test_good_values_pass_as_they_are() -> None:
    cfg = compose_config("gqa", 1, ["num_heads=4", "num_kv_heads=2", "dropout=0", "timeout_s=2.5", "context_length=6",
                                    "seed=18446744073709551615"])
    check_values(cfg)
    assert (cfg.dropout, cfg.timeout_s, cfg.seed) == (0, 2.5, 2**64 - 1)


def test_every_default_comes_from_the_schema_and_the_yaml_sets_none() -> None:
    cfg = compose_config("reference", 123)
    from omegaconf import OmegaConf

    assert {k.name: OmegaConf.select(cfg, k.name) for k in KEYS} == {k.name: k.default for k in KEYS}
    yaml = (config_dir() / "config.yaml").read_text().splitlines()
    assert not [line for line in yaml if line.split(":")[0] in {k.name.split(".")[0] for k in KEYS}]
    defaults = {k.name: k.default for k in KEYS}
    assert {k: v for k, v in DEFAULT_VALUES.items() if k != "context_length"} == {k: defaults[k] for k in DEFAULT_VALUES if k != "context_length"}
