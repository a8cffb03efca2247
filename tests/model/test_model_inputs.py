"""What a model is given: token ids as a list or a file (the same run as the text they encode),
a batch of texts (each item as its text alone), and a text of any characters through the Python
API, taken literally."""

from __future__ import annotations

import re

import numpy as np
import pytest
import torch

import attnlab
from attnlab.errors import UserError
from attnlab.inputs.text import gpt2_encoding
from tests.model.by_hand import OTHER, check_effect, eager_model, effect_by_hand, zero_head
from tests.model.conftest import TEXT
from tests.model.test_edit_checks import never_loaded  # noqa: F401 - a fixture

QUIET = ["log.tensorboard=false", "log.html=false", "log.table=false"]
LITERAL = "Every effort, moves; you 'a' \"b\" = {c} 100% ${seed} forward"


def _observed(folder, inputs: dict) -> attnlab.Result:
    return attnlab.run(overrides=[f"model.path={folder}", "layer=1", "intervene=observe", *QUIET], inputs=inputs)


def test_token_ids_as_a_list_or_a_file_run_as_the_text_they_encode(tiny_gpt2, tmp_path) -> None:
    ids = gpt2_encoding().encode(TEXT)
    (tmp_path / "ids.txt").write_text("\n".join(map(str, ids)))
    by_text = _observed(tiny_gpt2, {"kind": "text", "text": TEXT}).record
    for given in (ids, str(tmp_path / "ids.txt")):
        by_ids = _observed(tiny_gpt2, {"kind": "ids", "ids": given}).record
        assert by_ids.status == "ok" and by_ids.labels == by_text.labels
        np.testing.assert_array_equal(by_ids.reference.stages["weights"], by_text.reference.stages["weights"])


def test_an_id_past_the_vocabulary_is_one_line(tiny_gpt2) -> None:
    with pytest.raises(UserError, match=r"^inputs.ids has token id 60000; the model's vocabulary has 50257 rows"):
        _observed(tiny_gpt2, {"kind": "ids", "ids": [1, 60000]})


def test_a_text_of_any_characters_is_taken_literally_through_the_python_api(tiny_gpt2) -> None:
    record = _observed(tiny_gpt2, {"kind": "text", "text": LITERAL}).record
    encoding = gpt2_encoding()
    assert record.status == "ok" and record.config["inputs"]["text"] == LITERAL
    assert len(record.labels) == len(encoding.encode(LITERAL))


def test_a_batch_of_two_texts_has_each_texts_own_effect_and_stages(tiny_gpt2) -> None:
    """One (2, T) forward: each item's effect equals the hand-written ablation on that text alone in
    the model's own forward, and the layer's own weights its output_attentions on that text."""
    model, ids, other = eager_model(tiny_gpt2)
    result = attnlab.run(overrides=[f"model.path={tiny_gpt2}", "layer=1", *QUIET], inputs={"kind": "text", "texts": [TEXT, OTHER]},
                         intervene={"name": "ablate_head", "head": 1})
    effect = result.record.model.effect
    for item, text_ids in enumerate((ids, other)):
        check_effect(effect.batch_items[item], effect_by_hand(model, text_ids, 1, zero_head(1)), result.record)
        with torch.no_grad():
            own = model(input_ids=text_ids, use_cache=False, output_attentions=True).attentions[1]  # (1, nh, T, T)
        np.testing.assert_allclose(result.record.reference.stages["weights"][item], own[0].numpy(), atol=1e-6)
    assert effect.kl_mean == pytest.approx(sum(i.kl_mean for i in effect.batch_items) / 2, rel=1e-12)
    assert result.record.labels[:2] == ["Every", "·effort"]


SHORT = "Every effort moves you"  # 4 GPT-2 tokens against TEXT's 14


def _mean_abs_logit_change(before, after, token_ids):
    return (after - before).abs().mean()


def _effect(folder, inputs: dict, **intervene):
    result = attnlab.run(overrides=[f"model.path={folder}", "layer=1", *QUIET], inputs=inputs,
                         intervene={"name": "ablate_head", "head": 1, "metric": _mean_abs_logit_change, **intervene})
    assert result.record.status == "ok", result.record.error
    return result.record


@pytest.mark.parametrize("mode", ["zero", "mean"])
def test_a_padded_batch_has_each_texts_own_effect_at_its_real_positions(tiny_gpt2, mode) -> None:
    """Texts of 14 and 4 tokens in one padded (2, 14) forward with the attention mask: each text's
    effect (KL, top-1, loss, final hidden states, a metric of one's own) equals its run alone, and
    the zero ablation the hand-written hook's on that text alone; a mean is over the text's own positions."""
    batch_record = _effect(tiny_gpt2, {"kind": "text", "texts": [SHORT, TEXT]}, mode=mode)
    batch, moved = batch_record.model.effect, []
    for item, text in enumerate((SHORT, TEXT)):
        alone_record = _effect(tiny_gpt2, {"kind": "text", "text": text}, mode=mode)
        alone, padded = alone_record.model.effect, batch.batch_items[item]
        moved.append(_context_moved(alone_record))
        padded_values = dict(padded.items())  # KL, top-1, losses, hidden states, the metric
        for name, value in alone.items():
            assert padded_values[name] == pytest.approx(value, rel=1e-5, abs=1e-7), name
        assert padded.kl_mean > 1e-3
    if mode == "zero":
        model, _, _ = eager_model(tiny_gpt2)
        short = torch.tensor([gpt2_encoding().encode(SHORT)])  # (1, 4)
        hand = effect_by_hand(model, short, 1, zero_head(1))
        assert batch.batch_items[0].kl_mean == pytest.approx(hand["kl_mean"], rel=1e-5)
        assert batch.batch_items[0].loss_changed == pytest.approx(hand["loss_changed"], rel=1e-5)
    assert batch.kl_mean == pytest.approx(sum(i.kl_mean for i in batch.batch_items) / 2, rel=1e-12)
    assert (batch.positions, [i.positions for i in batch.batch_items]) == (18, [4, 14])
    assert _context_moved(batch_record) == pytest.approx(max(moved), rel=1e-3)  # the edit's finding: no pad's context


def _context_moved(record) -> float:
    """head 1's max |Δ context| as the intervention finding says it."""
    message = next(f.message for f in record.findings if f.code == "intervention")
    return float(re.search(r"max \|Δ context\| head 1 ([-+.e\d]+)\)", message).group(1))


def test_a_padded_batchs_weight_statistics_leave_its_pads_out(tiny_gpt2) -> None:
    """The layer's own weights' statistics of a padded batch are the mean of each text's alone (the
    largest of their errors), its head patterns the first text's alone: no pad row or key counted."""
    batch = _observed(tiny_gpt2, {"kind": "text", "texts": [SHORT, TEXT]}).record
    alone = [_observed(tiny_gpt2, {"kind": "text", "text": text}).record for text in (SHORT, TEXT)]
    assert batch.status == "ok", batch.error
    for name in ("weights_entropy_mean", "weights_entropy_norm_mean", "weights_row_max_mean", "weights_first_token_mass",
                 "weights_entropy_mean_h2", "weights_first_token_mass_h0"):
        mean = sum(r.variant.diagnostics[name] for r in alone) / 2
        assert batch.variant.diagnostics[name] == pytest.approx(mean, rel=1e-6), name
    assert batch.variant.diagnostics["weights_row_sum_max_err"] <= max(
        r.variant.diagnostics["weights_row_sum_max_err"] for r in alone) + 1e-6
    assert batch.variant.diagnostics["weights_col_sum_max_err"] == pytest.approx(
        max(r.variant.diagnostics["weights_col_sum_max_err"] for r in alone), rel=1e-6)
    assert [f.message for f in batch.findings] == [f.message for f in alone[0].findings]


def test_a_batch_of_texts_of_different_lengths_is_one_line_for_a_variant(tiny_gpt2, never_loaded) -> None:  # noqa: F811
    with pytest.raises(UserError, match=r"^inputs.texts are 14, 2 tokens \(GPT-2 BPE \(tiktoken\)\): texts of different "
                                        r"lengths run padded under intervene= in a Hugging Face causal LM; here a batch "
                                        r"runs texts of as many tokens: shorten or lengthen them, or run each text alone$"):
        attnlab.run("multi_head_attention", overrides=[f"model.path={tiny_gpt2}", "layer=1", *QUIET],
                    inputs={"kind": "text", "texts": [TEXT, "Every effort"]})


def test_a_batch_of_texts_without_a_model_is_one_line() -> None:
    with pytest.raises(UserError, match=r"^inputs.texts: a batch of texts runs in a model"):
        attnlab.run("multi_head_attention", inputs={"kind": "text", "texts": [TEXT, TEXT]}, overrides=QUIET)


def test_an_eager_in_memory_hugging_face_model_runs_with_its_cache_off() -> None:
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config(n_layer=2, n_head=4, n_embd=64, n_positions=64,
                                       attn_implementation="eager")).eval()
    assert model.config.use_cache
    result = attnlab.run("multi_head_attention", model=model, layer=1, inputs={"kind": "text", "text": TEXT},
                         overrides=QUIET)
    assert result.record.status == "ok", result.record.error
    assert result.record.model.effect.kl_mean < 1e-8  # the layer's own computation in its place


def test_an_in_memory_model_runs_without_a_copy_and_is_left_as_it_was() -> None:
    """No deep copy: the user's model itself runs, its layer swapped in place and put back, its
    modes restored, its weights untouched, even when the edited forward raises."""
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config(n_layer=2, n_head=4, n_embd=64, n_positions=64)).train()
    weights = {name: value.clone() for name, value in model.state_dict().items()}
    layer = model.transformer.h[1].attn
    model.__deepcopy__ = lambda _memo: pytest.fail("the run copied the model")  # copy.deepcopy calls it

    def boom(_context):
        raise RuntimeError("boom")

    swapped = attnlab.run("multi_head_attention", model=model, layer=1, inputs={"kind": "text", "text": TEXT},
                          overrides=QUIET).record
    failed = attnlab.run(model=model, layer=1, inputs={"kind": "text", "text": TEXT}, overrides=QUIET,
                         intervene={"name": "function", "function": boom}).record
    assert swapped.status == "ok" and swapped.model.effect.kl_mean < 1e-8
    assert failed.status == "failed" and "boom" in failed.error
    assert model.transformer.h[1].attn is layer
    assert all(module.training for module in model.modules())
    assert not any(module._forward_hooks or module._forward_pre_hooks for module in model.modules())
    assert all(torch.equal(value, weights[name]) for name, value in model.state_dict().items())


def test_a_model_run_on_another_device_is_refused_before_the_model_loads() -> None:
    with pytest.raises(UserError, match=r"^device=cuda: a run inside a model runs on the CPU for now; device=cpu$"):
        attnlab.run("multi_head_attention", device="cuda", overrides=["model=hf:no_such_type", *QUIET])


def test_a_language_model_without_text_is_refused_before_it_loads(tiny_gpt2, tmp_path) -> None:
    import shutil

    shutil.copy(tiny_gpt2 / "config.json", tmp_path / "config.json")  # no weights: loading would fail otherwise
    with pytest.raises(UserError, match=r"^model: a language model runs on text or token ids: .* \(got inputs=book\)$"):
        attnlab.run("multi_head_attention", overrides=[f"model.path={tmp_path}", *QUIET])
