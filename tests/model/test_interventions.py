"""Interventions as data: the effect of a head ablation and of activation patching equals the same
edit written by hand as a hook in the model's own forward; the record names the edit."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

import attnlab
from attnlab.errors import UserError
from attnlab.model.edits.scale_scores import ScaledScores
from attnlab.model.interventions import intervention
from tests.model.by_hand import HS, OTHER, check_effect, eager_model, effect_by_hand, zero_head
from tests.model.conftest import N_EMBD, N_HEAD, TEXT

QUIET = ["log.tensorboard=false", "log.html=false", "log.table=false"]


def _run(folder, layer: int, **intervene):
    overrides = [f"model.path={folder}", "inputs=text", f"inputs.text='{TEXT}'", f"layer={layer}", *QUIET]
    return attnlab.run(overrides=overrides, intervene=intervene).record


@pytest.mark.parametrize("mode", ["zero", "mean"])
def test_head_ablation_has_the_effect_of_a_hook_written_by_hand(tiny_gpt2, mode) -> None:
    model, ids, _ = eager_model(tiny_gpt2)
    record = _run(tiny_gpt2, 1, name="ablate_head", head=1, mode=mode)
    check_effect(record.model.effect, effect_by_hand(model, ids, 1, zero_head(1, mode)), record)
    assert record.variant.name == f"ablate_head(head=1, mode={mode})"
    assert record.config["intervene"] == {"name": "ablate_head", "head": 1, "mode": mode}


def test_activation_patching_has_the_effect_of_a_hook_written_by_hand(tiny_gpt2) -> None:
    model, ids, other = eager_model(tiny_gpt2)
    assert ids.shape == other.shape
    kept = []
    hook = model.transformer.h[0].attn.c_proj.register_forward_pre_hook(lambda _m, args: kept.append(args[0].clone()))
    with torch.no_grad():
        model(input_ids=other, use_cache=False)
    hook.remove()

    def patch(context):  # (1, T, d): head 2's columns from the other text's run
        context = context.clone()
        context[..., 2 * HS:3 * HS] = kept[0][..., 2 * HS:3 * HS]
        return context

    record = _run(tiny_gpt2, 0, name="patch", head=2, text=OTHER)
    check_effect(record.model.effect, effect_by_hand(model, ids, 0, patch), record)


@pytest.mark.parametrize("factor", [0.5, 0.0, -1.0])
def test_scaling_scores_has_the_effect_of_a_hook_written_by_hand(tiny_gpt2, factor) -> None:
    """The layer's attention recomputed by hand from its fused q, k, v projection, head 3's scores
    times `factor` after the scaling, the causal mask put on after (a factor of 0 or -1 never unmasks
    a later token), its context vectors put where c_proj reads them."""
    model, ids, _ = eager_model(tiny_gpt2)
    attn = model.transformer.h[1].attn
    qkv = []
    hook = attn.c_attn.register_forward_hook(lambda _m, _args, out: qkv.append(out))

    def scaled_by_hand(factor: float):
        def edit(context):  # (1, T, d): replaced by the hand-made one
            queries, keys, values = (part.unflatten(-1, (N_HEAD, HS)).transpose(1, 2)
                                     for part in qkv[-1].split(N_EMBD, dim=-1))  # (1, nh, T, hs)
            attn_scores = queries @ keys.transpose(-2, -1) / HS ** 0.5  # (1, nh, T, T)
            n = attn_scores.shape[-1]
            attn_scores[:, 3] *= factor
            attn_scores = attn_scores.masked_fill(torch.ones(n, n, dtype=torch.bool).triu(1), -torch.inf)
            context_vec = torch.softmax(attn_scores, dim=-1) @ values  # (1, nh, T, hs)
            return context_vec.transpose(1, 2).flatten(-2)  # (1, T, d)
        return edit

    unchanged = effect_by_hand(model, ids, 1, scaled_by_hand(1.0))
    assert unchanged["kl_mean"] < 1e-12  # the hand-made attention is the layer's own
    hand = effect_by_hand(model, ids, 1, scaled_by_hand(factor))
    hook.remove()
    record = _run(tiny_gpt2, 1, name="scale_scores", head=3, factor=factor)
    check_effect(record.model.effect, hand, record)
    assert record.variant.name == f"scale_scores(head=3, factor={factor})"
    weights = record.variant.canonical("weights")[0, 3]  # (T, T)
    assert (weights[np.triu_indices(weights.shape[0], 1)] == 0).all()  # every later token still masked


def test_observe_captures_every_layer_without_an_effect(tiny_gpt2) -> None:
    results = attnlab.run(overrides=[f"model.path={tiny_gpt2}", "inputs=text", f"inputs.text='{TEXT}'",
                                     "layer=all", "intervene=observe", *QUIET])
    assert [r.record.model.layer for r in results] == [0, 1]
    assert not isinstance(results[1].record.variant.stages["weights"], np.memmap)  # every layer's fit: in memory
    for result in results:
        assert result.record.status == "ok" and result.record.model.effect is None
        assert result.record.variant.stages["weights"].shape == (1, N_HEAD, 14, 14)
        assert not [f for f in result.findings if f.severity != "info"]


def test_observe_writes_a_later_layers_stages_once_where_memory_is_short(tiny_gpt2, monkeypatch) -> None:
    """Spilled to disk, the model's own stages (both sides of an observed layer) are one file each, not two."""
    monkeypatch.setattr("attnlab.app.run_job.available_bytes", lambda: (0, "none"))
    results = attnlab.run(overrides=[f"model.path={tiny_gpt2}", "inputs=text", f"inputs.text='{TEXT}'",
                                     "layer=all", "intervene=observe", *QUIET])
    later = results[1].record
    stages = {name: values for name, values in later.variant.stages.items() if values is not None}
    assert "weights" in stages and "scaled_scores" in stages
    for name, values in stages.items():
        assert isinstance(values, np.memmap) and later.reference.stages[name] is values, name
    assert len(list(Path(later.scratch.name).glob("*.npy"))) == len(stages)


@pytest.mark.parametrize("block, message", [
    ({"name": "ablate"}, "intervene=ablate: unknown; allowed are observe, ablate_head, scale_scores, patch, function"),
    ({"name": "ablate_head"}, "intervene=ablate_head: needs intervene.head=..."),
    ({"name": "ablate_head", "head": -1}, "intervene.head=-1: must be a head index (0, 1, ...), a list of them or all"),
    ({"name": "ablate_head", "head": 0, "mode": "max"}, "intervene.mode=max: allowed are zero, mean"),
    ({"head": 0}, "intervene.head: needs intervene=KIND (observe, ablate_head, scale_scores, patch, function)"),
])
def test_a_mistaken_intervention_is_one_line(block, message) -> None:
    with pytest.raises(UserError) as raised:
        intervention(block)
    assert str(raised.value) == message


@pytest.mark.slow
def test_a_sweep_over_layers_and_heads_writes_the_layer_by_head_grid(tiny_gpt2, tmp_path) -> None:
    import csv
    import json
    import subprocess
    import sys

    sweep = tmp_path / "sweep"
    proc = subprocess.run([sys.executable, "-m", "attnlab", "-m", f"model.path={tiny_gpt2}", "inputs=text",
                           f"inputs.text='{TEXT}'", "layer=0,1", "intervene=ablate_head", "intervene.head=0,3",
                           "log.tensorboard=false", "log.html=false", f"hydra.sweep.dir={sweep}"],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    effects = {}
    for path in sweep.glob("*/record.json"):
        record = json.loads(path.read_text())
        effects[str(record["model"]["layer"]), record["config"]["intervene"]["head"]] = record["model"]["effect"]["kl_mean"]
    with (sweep / "effect_by_layer_and_head.csv").open() as handle:
        rows = list(csv.reader(handle))
    assert rows[0] == ["layer", "head 0", "head 3"]
    assert {(row[0], head): float(value) for row in rows[1:] for head, value in zip((0, 3), row[1:])} == effects
    assert (sweep / "effect_by_layer_and_head.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_python_function_edits_the_contexts_as_the_same_ablation(tiny_gpt2) -> None:
    def zero_head_1(context):  # (1, T, H, hs)
        context = context.clone()
        context[:, :, 1] = 0.0
        return context

    by_function = _run(tiny_gpt2, 1, name="function", function=zero_head_1)
    by_kind = _run(tiny_gpt2, 1, name="ablate_head", head=1)
    assert by_function.status == "ok", by_function.error
    assert by_function.model.effect.kl_mean == by_kind.model.effect.kl_mean > 0
    said = [(f.code, f.severity, f.heads) for f in by_function.findings if f.code == "intervention"]
    assert said == [("intervention", "info", [1])]  # the head the function changed, measured
    assert not [f for f in by_function.findings if f.severity == "error"]
    assert by_function.variant.name.startswith("function(function=session:zero_head_1_")


def test_scaling_scores_a_fused_kernel_never_shows_fails_the_record_saying_so(tiny_gpt2) -> None:
    record = attnlab.run(overrides=[f"model.path={tiny_gpt2}", "model.attn_implementation=sdpa", "inputs=text",
                                    f"inputs.text='{TEXT}'", "layer=0", *QUIET],
                         intervene={"name": "scale_scores", "factor": 0.5}).record
    assert record.status == "failed"
    assert record.error.endswith("intervene=scale_scores: the layer called no softmax on (batch, heads, T, T) scores "
                                 "(a fused kernel computes them unseen); run it with model.attn_implementation=eager")


@pytest.mark.parametrize("fill", [-torch.inf, torch.finfo(torch.float32).min, -1e9, -1e4])
@pytest.mark.parametrize("factor", [0.5, 0.0, -1.0])
def test_scaled_scores_keep_the_mask_whatever_its_fill(fill, factor) -> None:
    """A softmax input masked by -inf or by a large negative fill (put in, or added as Hugging Face and
    BERT add theirs), scaled: the masked cells keep weight 0, the others are softmax(factor x score)."""
    torch.manual_seed(0)
    queries, keys = torch.randn(2, 1, 3, 5, 4).unbind(0)  # (1, nh, T, hs)
    attn_scores = queries @ keys.transpose(-2, -1) / 2.0  # (1, nh, T, T)
    mask = torch.ones(5, 5, dtype=torch.bool).triu(1)

    def attention() -> torch.Tensor:
        if fill in (-1e9, -1e4):  # added to the scores, as an additive attention mask is
            return torch.softmax(attn_scores + torch.where(mask, fill, 0.0), dim=-1)
        return torch.softmax(attn_scores.masked_fill(mask, fill), dim=-1)

    with ScaledScores(factor, head=1):
        weights = attention()  # (1, nh, T, T)
    by_hand = attn_scores.clone()
    by_hand[:, 1] *= factor
    expected = torch.softmax(by_hand.masked_fill(mask, -torch.inf), dim=-1)
    assert (weights[..., mask] == 0).all()
    torch.testing.assert_close(weights, expected, rtol=0, atol=1e-6)


@pytest.mark.parametrize("family", ["gpt2", "llama"])
@pytest.mark.parametrize("intervene, stage", [
    ({"name": "ablate_head", "head": 3}, "context"),
    ({"name": "patch", "head": 0, "text": "Each effort moves you backward today"}, "context"),
    ({"name": "scale_scores", "head": 2, "factor": 0.5}, "scaled_scores"),
])
def test_an_edit_is_named_as_the_edit_it_is_and_no_error(family, intervene, stage) -> None:
    """Every kind on GPT-2 and Llama built from their configs: no error finding, one info finding
    naming the edit; the edited head's stage changed and no other head's."""
    sizes = {"gpt2": ["model=hf:gpt2", "model.n_layer=2", "model.n_head=4", "model.n_embd=64",
                      "model.initializer_range=0.2"],
             "llama": ["model=hf:llama", "model.num_hidden_layers=2", "model.num_attention_heads=4",
                       "model.num_key_value_heads=2", "model.hidden_size=64", "model.intermediate_size=128",
                       "model.initializer_range=0.2"]}[family]
    record = attnlab.run(overrides=[*sizes, "inputs=text", "inputs.text='Every effort moves you forward today'",
                                    "layer=1", *QUIET], intervene=intervene).record
    assert record.status == "ok", record.error
    assert not [f for f in record.findings if f.severity == "error"], record.findings
    said = [f for f in record.findings if f.code == "intervention"]
    assert len(said) == 1 and said[0].stage == stage and said[0].heads == [intervene["head"]]
    assert said[0].message.startswith(f"the edit {record.variant.name}: head {intervene['head']}'s ")
    assert record.first_divergent_stage == stage
    mine, own = record.variant.canonical(stage)[0], record.reference.canonical(stage)[0]  # (H, T, ·)
    unmasked = np.isfinite(own) & (own > -1e30)
    moved = [float(np.abs(np.where(unmasked[h], mine[h] - own[h], 0)).max()) for h in range(4)]
    assert moved[intervene["head"]] > 1e-3
    assert [m for h, m in enumerate(moved) if h != intervene["head"]] == [0.0] * 3
    if intervene["name"] == "scale_scores":  # the edited head's own factor: 0.5 x 1/sqrt(head_dim = 16) = 0.125
        assert "head 2 0.125 (the model's own 0.25)" in said[0].message
        assert "the model's mask kept (60 masked cells)" in said[0].message
