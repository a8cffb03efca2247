"""Effects read from the model's own logits: Cohere's `logit_scale` and Granite's `logits_scaling`
(tied heads, scaled after the head) checked against the model's own forward run by hand, with and
without a change at one layer (a hook here, the same change as a module in attnlab's swap)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from attnlab.model.effect import log_probs
from attnlab.model.forward import Final
from attnlab.model.layer import ModelRun
from attnlab.model.loading import load_model
from attnlab.model.locate import attention_modules
from attnlab.model.model_spec import model_spec
from attnlab.model.sizes import model_sizes
from tests.model.conftest import TEXT

SIZES = {"hidden_size": 64, "num_attention_heads": 4, "num_key_value_heads": 4, "num_hidden_layers": 2,
         "intermediate_size": 128, "vocab_size": 50257}
SCALED = {"cohere": {"logit_scale": 4.0}, "granite": {"logits_scaling": 0.25}}
GAIN = 1.5


class Louder(nn.Module):
    """The layer's own attention with its output multiplied by GAIN."""

    def __init__(self, attention: nn.Module) -> None:
        super().__init__()
        self.attention = attention

    def forward(self, *args, **kwargs):
        out, *rest = self.attention(*args, **kwargs)
        return (out * GAIN, *rest)


def _louder(_module, _args, out):
    return (out[0] * GAIN, *out[1:])


def _by_hand(model: nn.Module, attention: nn.Module, ids: torch.Tensor) -> dict[str, float]:
    with torch.no_grad():
        base = model(input_ids=ids, use_cache=False).logits[0]  # (T, vocab)
        hook = attention.register_forward_hook(_louder)
        changed = model(input_ids=ids, use_cache=False).logits[0]  # (T, vocab)
        hook.remove()
    p, q = F.log_softmax(base.double(), -1), F.log_softmax(changed.double(), -1)  # (T, vocab)
    return {"kl_mean": float(F.kl_div(q, p, log_target=True, reduction="none").sum(-1).mean()),
            "top1_agreement": float((p.argmax(-1) == q.argmax(-1)).double().mean()),
            "loss": float(F.cross_entropy(base[:-1], ids[0, 1:])),
            "loss_changed": float(F.cross_entropy(changed[:-1], ids[0, 1:]))}


@pytest.mark.parametrize("family", sorted(SCALED))
def test_effects_are_those_of_the_models_own_scaled_logits(family) -> None:
    loaded = load_model(model_spec({"name": f"hf:{family}", **SIZES, **SCALED[family]}))
    config = loaded.module.config
    assert config.tie_word_embeddings or family == "granite"
    attention = attention_modules(loaded.module)
    ids = loaded.tokenizer.encode(TEXT)
    run = ModelRun.start(loaded, attention, model_sizes(config, loaded.label), ids, loaded.tokenizer.labels(ids), [0])
    name, module = attention[0]
    effect = run.effects([run.changed_final(0, Louder(module), seed=0)])[0]
    hand = _by_hand(loaded.module, module, run.ids)
    assert effect.kl_mean == pytest.approx(hand["kl_mean"], rel=1e-4, abs=1e-7)
    assert effect.kl_mean > 1e-3  # the change shows, so the scaling matters
    assert effect.top1_agreement == pytest.approx(hand["top1_agreement"])
    assert effect.loss == pytest.approx(hand["loss"], rel=1e-5)
    assert effect.loss_changed == pytest.approx(hand["loss_changed"], rel=1e-5)


def test_an_unchanged_layer_gives_a_kl_of_exactly_zero_never_negative() -> None:
    loaded = load_model(model_spec({"name": "hf:cohere", **SIZES}))
    attention = attention_modules(loaded.module)
    ids = loaded.tokenizer.encode(TEXT)
    run = ModelRun.start(loaded, attention, model_sizes(loaded.module.config, loaded.label), ids,
                         loaded.tokenizer.labels(ids), [1])
    effect = run.effects([run.changed_final(1, attention[1][1], seed=0)])[0]
    assert effect.kl_mean == 0.0 and effect.kl_max == 0.0 and effect.kl_clamped <= 0.0
    assert effect.top1_agreement == 1.0


@pytest.mark.parametrize("family, scaled", [*SCALED.items(), ("gemma2", {"final_logit_softcapping": 3.0})])
def test_logits_attnlab_makes_from_the_head_are_the_models_own(family, scaled) -> None:
    """Where a run has no logits of its own, the head's output is scaled as the family declares: the
    result equals the model's forward (Cohere multiplies, Granite divides, Gemma 2 caps)."""
    sizes_of = {"gemma2": {"head_dim": 16}}.get(family, {})
    loaded = load_model(model_spec({"name": f"hf:{family}", **SIZES, **sizes_of, **scaled}))
    model = loaded.module
    ids = torch.tensor([loaded.tokenizer.encode(TEXT)])  # (1, T)
    with torch.no_grad():
        own = F.log_softmax(model(input_ids=ids, use_cache=False).logits[0].double(), -1)  # (T, vocab)
        hidden = model.model(input_ids=ids, use_cache=False).last_hidden_state  # (1, T, d) the head's input
    made = log_probs(model.lm_head, Final(hidden), 0, 0, ids.shape[1], model_sizes(model.config, loaded.label).logits)
    assert torch.allclose(made, own, atol=1e-5)
    unscaled = F.log_softmax(model.lm_head(hidden[0]).double(), -1)  # (T, vocab)
    assert not torch.allclose(unscaled, own, atol=1e-3)  # the scaling is there to be read
