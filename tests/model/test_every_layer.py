"""Every layer's stages captured in one forward of the unchanged model equal each layer captured
on its own (its attention called again on what it received), stage for stage, and the weights equal
the model's own (`output_attentions=True`)."""

from __future__ import annotations

import pytest
import torch

from attnlab.model.layer import ModelRun, OwnCaptures
from attnlab.model.loading import load_model
from attnlab.model.locate import attention_modules
from attnlab.model.model_spec import model_spec
from attnlab.model.sizes import model_sizes
from tests.model.conftest import TEXT

LLAMA = {"name": "hf:llama", "hidden_size": 64, "num_attention_heads": 4, "num_key_value_heads": 2,
         "num_hidden_layers": 3, "intermediate_size": 128, "vocab_size": 50257}


def _runs(block: dict) -> tuple[ModelRun, ModelRun, torch.Tensor]:
    loaded = load_model(model_spec(block))
    attention = attention_modules(loaded.module)
    ids = loaded.tokenizer.encode(TEXT)
    layers = list(range(len(attention)))
    sizes, labels = model_sizes(loaded.module.config, loaded.label), loaded.tokenizer.labels(ids)
    together = ModelRun.start(loaded, attention, sizes, ids, labels, layers, own=OwnCaptures(layers))
    alone = ModelRun.start(loaded, attention, sizes, ids, labels, layers)
    with torch.no_grad():
        weights = loaded.module(input_ids=together.ids, output_attentions=True, use_cache=False).attentions
    return together, alone, torch.stack(weights)  # (L, 1, H, T, T)


@pytest.mark.parametrize("block", [LLAMA, "tiny_gpt2"], ids=["llama", "gpt2"])
def test_one_forward_captures_every_layer_as_each_layer_alone(block, request) -> None:
    if block == "tiny_gpt2":
        block = {"path": str(request.getfixturevalue("tiny_gpt2"))}
    together, alone, weights = _runs(block)
    assert sorted(together.own.captures) == list(range(len(together.attention)))
    for layer in range(len(together.attention)):
        one, own = together.capture_own(layer, seed=0), alone.capture_own(layer, seed=0)
        assert sorted(one.stages) == sorted(own.stages) and not one.missing
        for stage, values in own.stages.items():
            torch.testing.assert_close(one.stages[stage], values, rtol=0, atol=0, msg=f"layer {layer} {stage}")
        torch.testing.assert_close(one.stages["weights"], weights[layer], rtol=1e-6, atol=1e-7)
    assert together.own.captures == {}  # each handed over once: the records hold them, not the run


def test_spilled_layers_keep_their_own_stages_each_in_its_own_folder(tiny_gpt2, monkeypatch) -> None:
    import numpy as np

    import attnlab

    def run():
        return attnlab.run("mha_scaled_by_d_out", overrides=[f"model.path={tiny_gpt2}", "inputs=text",
                                                            f"inputs.text='{TEXT}'", "layer=all",
                                                            "log.tensorboard=false", "log.html=false",
                                                            "log.table=false"])

    kept = run()
    monkeypatch.setattr("attnlab.model.layer.SPILL_STAGE_BYTES", 1)  # every layer's square stages to disk
    spilled = run()
    folders = [result.record.scratch.name for result in spilled]
    assert len(set(folders)) == len(folders) == 2
    for one, other in zip(kept, spilled):
        for stage in ("weights", "scores"):
            assert isinstance(other.reference_stages[stage], np.memmap)
            np.testing.assert_array_equal(one.reference_stages[stage], other.reference_stages[stage])
            np.testing.assert_array_equal(one.stages[stage], other.stages[stage])
