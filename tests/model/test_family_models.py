"""Whole models of the families with an adapter, tiny and random: a correct copy of the layer's
attention changes nothing (KL < 1e-6), and a changed copy (its scores left unscaled) has the effect
the model's own forward with that layer swapped by hand has, to 1e-6 relative."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import attnlab
from attnlab.inputs.text import gpt2_encoding
from tests.model.conftest import TEXT

transformers = pytest.importorskip("transformers")

SEED = 123
SIZES = {"num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 4, "num_key_value_heads": 2,
         "intermediate_size": 64, "vocab_size": 50257}
# families whose decoder layers keep their attention at model.layers.{i}.self_attn and scale by self.scaling
FAMILIES = ["llama", "qwen3", "mistral", "gemma2", "smollm3"]
PAD = {"smollm3": {"pad_token_id": None}}  # its padding id is past GPT-2's vocabulary, as attnlab loads it


def overrides(name: str) -> list[str]:
    sizes = [f"model.{key}={value}" for key, value in SIZES.items() if key != "vocab_size"]
    return [f"model=hf:{name}", *sizes, "inputs=text", f"inputs.text='{TEXT}'", "layer=1", f"seed={SEED}",
            "log.tensorboard=false"]


@pytest.fixture
def unscaled(tmp_path, use_plugins):
    """Each family's attention class with its scores left unscaled, as an import-and-subclass plugin."""
    (tmp_path / "plugins").mkdir()
    for name in FAMILIES:
        from attnlab.modules.hf import attention_class

        cls, _ = attention_class(name)
        (tmp_path / "plugins" / f"unscaled_{name}.py").write_text(
            f"from {cls.__module__} import {cls.__name__}\n\n\n"
            f"class Unscaled{cls.__name__}({cls.__name__}):\n"
            f"    def __init__(self, *args, **kwargs):\n"
            f"        super().__init__(*args, **kwargs)\n"
            f"        self.scaling = 1.0\n")
    use_plugins(tmp_path / "plugins")


def _swapped_by_hand(name: str) -> float:
    """KL max of the model's own logits, layer 1's attention swapped for an unscaled copy by hand."""
    from attnlab.modules.hf import attention_class
    from attnlab.modules.roles import manual_seed

    cls, _ = attention_class(name)
    config = transformers.AutoConfig.for_model(name, **SIZES, **PAD.get(name, {}))
    manual_seed(SEED)
    model = transformers.AutoModelForCausalLM.from_config(config, attn_implementation="eager").eval()
    ids = torch.tensor([gpt2_encoding().encode(TEXT)])
    own = model.model.layers[1].self_attn
    changed = type("Unscaled", (cls,), {})(config=model.config, layer_idx=1).eval()
    changed.load_state_dict(own.state_dict())
    changed.scaling = 1.0
    with torch.no_grad():
        base = F.log_softmax(model(ids).logits[0].double(), -1)  # float64: a KL sums 50,257 terms
        model.model.layers[1].self_attn = changed
        swapped = F.log_softmax(model(ids).logits[0].double(), -1)
    return float(F.kl_div(swapped, base, log_target=True, reduction="none").sum(-1).max())


@pytest.mark.parametrize("name", FAMILIES)
def test_a_correct_copy_in_the_family_s_model_changes_nothing(name):
    result = attnlab.run(f"hf:{name}", overrides=overrides(name))
    assert result.record.status == "ok", result.record.error
    assert result.record.model.attention == "model.layers.1.self_attn"
    assert result.record.model.effect.kl_max < 1e-6


@pytest.mark.parametrize("name", FAMILIES)
@pytest.mark.slow
def test_an_unscaled_copy_has_the_effect_of_the_same_swap_by_hand(name, unscaled):
    result = attnlab.run(f"unscaled_{name}", overrides=overrides(name))
    assert result.record.status == "ok", result.record.error
    by_hand = _swapped_by_hand(name)
    assert by_hand > 1e-7  # the change shows
    assert result.record.model.effect.kl_max == pytest.approx(by_hand, rel=1e-6)


def test_longt5s_bucketed_local_attention_runs_and_says_what_it_cannot_place() -> None:
    """Its encoder's default layer computes in blocks: the reference's stages cannot be placed. The
    run crashed on the missing scaled_scores ("attnlab: error: 'scaled_scores'"); it now runs, and the
    effect on the model's output is still measured."""
    record = attnlab.run("multi_head_attention", overrides=[
        "model=hf:longt5", "model.d_model=64", "model.num_heads=4", "model.num_layers=2", "model.d_ff=64",
        "model.d_kv=16", "inputs=text"], log={"tensorboard": False, "table": False, "html": False}).record
    assert record.ok, record.error
    assert record.model.effect is not None and record.model.effect.kl_mean > 0  # a causal mask in a bidirectional encoder
