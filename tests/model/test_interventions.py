"""Interventions as data: the effect of a head ablation and of activation patching equals the same
edit written by hand as a hook in the model's own forward; the record names the edit."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import attnlab
from attnlab.errors import UserError
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


def test_scaling_scores_has_the_effect_of_a_hook_written_by_hand(tiny_gpt2) -> None:
    """The layer's attention recomputed by hand from its fused q, k, v projection, head 3's scores
    times 0.5 after the scaling and the causal mask, its context vectors put where c_proj reads them."""
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
            attn_scores = attn_scores.masked_fill(torch.ones(n, n, dtype=torch.bool).triu(1), -torch.inf)
            attn_scores[:, 3] *= factor
            context_vec = torch.softmax(attn_scores, dim=-1) @ values  # (1, nh, T, hs)
            return context_vec.transpose(1, 2).flatten(-2)  # (1, T, d)
        return edit

    unchanged = effect_by_hand(model, ids, 1, scaled_by_hand(1.0))
    assert unchanged["kl_mean"] < 1e-12  # the hand-made attention is the layer's own
    hand = effect_by_hand(model, ids, 1, scaled_by_hand(0.5))
    hook.remove()
    record = _run(tiny_gpt2, 1, name="scale_scores", head=3, factor=0.5)
    check_effect(record.model.effect, hand, record)
    assert record.variant.name == "scale_scores(head=3, factor=0.5)"


def test_observe_captures_every_layer_without_an_effect(tiny_gpt2) -> None:
    results = attnlab.run(overrides=[f"model.path={tiny_gpt2}", "inputs=text", f"inputs.text='{TEXT}'",
                                     "layer=all", "intervene=observe", *QUIET])
    assert [r.record.model.layer for r in results] == [0, 1]
    assert isinstance(results[1].record.variant.stages["weights"], np.memmap)  # a later layer's stages on disk, not in RAM
    for result in results:
        assert result.record.status == "ok" and result.record.model.effect is None
        assert result.record.variant.stages["weights"].shape == (1, N_HEAD, 14, 14)
        assert not [f for f in result.findings if f.severity != "info"]


@pytest.mark.parametrize("block, message", [
    ({"name": "ablate"}, "intervene=ablate: unknown; allowed are observe, ablate_head, scale_scores, patch, function"),
    ({"name": "ablate_head"}, "intervene=ablate_head: needs intervene.head=..."),
    ({"name": "ablate_head", "head": -1}, "intervene.head=-1: must be a head index (0, 1, ...)"),
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
    assert by_function.variant.name.startswith("function(function=session:zero_head_1_")


def test_scaling_scores_a_fused_kernel_never_shows_fails_the_record_saying_so(tiny_gpt2) -> None:
    record = attnlab.run(overrides=[f"model.path={tiny_gpt2}", "model.attn_implementation=sdpa", "inputs=text",
                                    f"inputs.text='{TEXT}'", "layer=0", *QUIET],
                         intervene={"name": "scale_scores", "factor": 0.5}).record
    assert record.status == "failed"
    assert record.error.endswith("intervene=scale_scores: the layer called no softmax on (batch, heads, T, T) scores "
                                 "(a fused kernel computes them unseen); run it with model.attn_implementation=eager")
