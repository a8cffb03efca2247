"""The terminal's lines for a model run on a batch of texts: the batch's effect, then a line per text."""

from __future__ import annotations

from dataclasses import replace

from attnlab.record import Effect, ModelInfo, Record
from attnlab.sinks.model_lines import layer_lines


def _effect(kl_mean: float, top1: float, batch_items: list[Effect] | None = None) -> Effect:
    return Effect(kl_mean=kl_mean, kl_max=2 * kl_mean, kl_clamped=0.0, top1_agreement=top1, loss=3.0, loss_changed=3.5,
                  hidden_divergence=0.5, hidden_relative_divergence=0.1, non_finite_positions=0,
                  batch_items=batch_items)


def test_a_batch_of_texts_has_its_effect_then_each_texts() -> None:
    items = [_effect(0.25, 1.0), _effect(0.75, 0.5)]
    about = ModelInfo(model="tiny", n_layers=2, parameters=1000, tokenizer="GPT-2 BPE", heads=4, kv_heads=4, layer=1,
                      attention="transformer.h.1.attn", effect=_effect(0.5, 0.75, items))
    lines = layer_lines(Record(variant="v", seed=1, config={}, n_tokens=4, model=about))
    assert lines[2].startswith("effect on the model's output, 2 texts (8 tokens): KL mean 0.5 · max 1 · "
                               "top-1 agreement 6/8")
    assert lines[3].startswith("  text 0 (4 tokens): KL mean 0.25 · max 0.5 · top-1 agreement 4/4")
    assert lines[4].startswith("  text 1 (4 tokens): KL mean 0.75 · max 1.5 · top-1 agreement 2/4")
    assert len(lines) == 5


def test_a_padded_batch_counts_each_texts_own_positions() -> None:
    """Texts of 4 and 10 tokens: 3 of 4 and 10 of 10 agree; the batch's share is their mean (each
    text counts once), its count their sum: 13 of 14 positions, never a pad's."""
    items = [replace(_effect(0.25, 0.75), positions=4), replace(_effect(0.75, 1.0), positions=10)]
    whole = replace(_effect(0.5, 0.875, items), positions=14, metrics={"mean_abs_logit_change": 0.125})
    about = ModelInfo(model="tiny", n_layers=2, parameters=1000, tokenizer="GPT-2 BPE", heads=4, kv_heads=4, layer=1,
                      attention="transformer.h.1.attn", effect=whole)
    lines = layer_lines(Record(variant="v", seed=1, config={}, n_tokens=10, model=about))
    assert lines[2].startswith("effect on the model's output, 2 texts (14 tokens): KL mean 0.5 · max 1 · "
                               "top-1 agreement 13/14")
    assert lines[2].endswith(" · mean_abs_logit_change 0.125")
    assert lines[3].startswith("  text 0 (4 tokens): KL mean 0.25 · max 0.5 · top-1 agreement 3/4")
    assert lines[4].startswith("  text 1 (10 tokens): KL mean 0.75 · max 1.5 · top-1 agreement 10/10")
