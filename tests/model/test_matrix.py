"""The layer x variant matrix in-process: every multi-head mistake of the zoo put into each layer of a
tiny saved GPT-2 gives the finding its plugin declares, at that layer, and changes the predictions."""

from __future__ import annotations

import pytest

import attnlab
from attnlab.modules.registry import discover
from tests.model.conftest import N_LAYER, TEXT

MISTAKES = sorted(name for name, spec in discover().specs.items()
                  if "multi_head" in spec.tags and name.startswith("mha_") and spec.expected_finding)


def test_the_matrix_holds_the_multi_head_mistakes() -> None:
    assert len(MISTAKES) >= 8 and "mha_scaled_by_d_out" in MISTAKES


@pytest.mark.parametrize("name", MISTAKES)
def test_each_mistake_at_each_layer_gives_its_finding_and_an_effect(tiny_gpt2, name) -> None:
    results = attnlab.run(name, overrides=[f"model.path={tiny_gpt2}", "inputs=text", f"inputs.text='{TEXT}'",
                                           "layer=all", "log.tensorboard=false"])
    assert [r.record.model.layer for r in results] == list(range(N_LAYER))
    expected = discover().specs[name].expected_finding
    for result in results:
        assert result.record.ok, result.record.error
        assert expected in {(f.code, f.stage) for f in result.findings}, (result.record.model.layer, result)
        effect = result.record.model.effect
        # softmax over the heads of -inf-masked scores is 0/0: the model's predictions become NaN, and say so
        assert effect.kl_mean > 1e-7 or effect.non_finite_positions > 0
