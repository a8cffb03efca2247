"""The schema's keys checked on the command line's own values (`check_given_values`), before the plugins and
torch are imported: the same one line the composed config's check gives, and nothing it cannot judge."""

from __future__ import annotations

import pytest
from omegaconf import OmegaConf

from attnlab.app.config_values import check_given_values, check_key
from attnlab.errors import UserError


@pytest.mark.parametrize("arg,key,value", [("n_seeds=0", "n_seeds", 0), ("show.head=-1", "show.head", -1),
                                           ("dtype=float8", "dtype", "float8"), ("qkv_bias=maybe", "qkv_bias", "maybe")])
def test_a_bad_value_given_is_refused_in_the_composed_checks_words(arg, key, value):
    with pytest.raises(UserError) as given:
        check_given_values(["variant=unscaled", arg])
    with pytest.raises(UserError) as composed:
        check_key(OmegaConf.create({key.split(".")[0]: {"head": value}} if "." in key else {key: value}), key)
    assert str(given.value) == str(composed.value)


def test_what_only_the_composed_config_can_judge_is_left_to_it():
    check_given_values(["n_seeds=2", "dropout=0.1", "layer=[0,2]", "device=auto"])  # good values
    check_given_values(["n_seeds=0,1"])  # a sweep's list: the sweeper checks each value
    check_given_values(["n_seeds=${seed}"])  # an interpolation: its value is known once composed
    check_given_values(["+n_seeds=0", "n_sedes=0", "inputs.n_tokens=0"])  # added, unknown or not a key of the schema's
    check_given_values(["n_seeds=[unclosed"])  # what Hydra cannot parse: Hydra's own error, later
