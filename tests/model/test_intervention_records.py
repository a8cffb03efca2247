"""A layer x head sweep in one run (`intervene.head=all` or a list): the model loaded once, its
unmodified forward once, then one forward per edit; each cell's effect equals the single-edit run's
and the same edit written by hand as a hook in plain torch, and the run writes one table."""

from __future__ import annotations

import csv
import subprocess
import sys

import pytest
import torch

import attnlab
from attnlab.errors import UserError
from attnlab.model import model_job
from attnlab.model.interventions import intervention
from tests.model.by_hand import HS, OTHER, eager_model, effect_by_hand, zero_head
from tests.model.conftest import N_HEAD, N_LAYER, TEXT

QUIET = ["log.tensorboard=false", "log.html=false", "log.table=false"]


def _words(folder, layer: str) -> list[str]:
    return [f"model.path={folder}", "inputs=text", f"inputs.text='{TEXT}'", f"layer={layer}"]


def _cells(results) -> dict[tuple[int, int], object]:
    return {(r.record.model.layer, head): effect for r in results
            for head, effect in zip(r.record.model.edited_heads, r.record.model.head_effects)}


def test_every_head_of_every_layer_in_one_run_equals_single_edits_and_a_hand_written_hook(tiny_gpt2) -> None:
    results = attnlab.run(overrides=[*_words(tiny_gpt2, "all"), *QUIET], intervene={"name": "ablate_head", "head": "all"})
    cells = _cells(results)
    assert sorted(cells) == [(layer, head) for layer in range(N_LAYER) for head in range(N_HEAD)]
    model, ids, _ = eager_model(tiny_gpt2)
    for layer, head in [(0, 1), (1, 2), (1, 3)]:
        single = attnlab.run(overrides=[*_words(tiny_gpt2, str(layer)), *QUIET],
                             intervene={"name": "ablate_head", "head": head}).record
        assert cells[layer, head] == single.model.effect  # every measure, bit for bit
        hand = effect_by_hand(model, ids, layer, zero_head(head))
        assert cells[layer, head].kl_mean == pytest.approx(hand["kl_mean"], rel=1e-6)
        assert cells[layer, head].loss_changed == pytest.approx(hand["loss_changed"], rel=1e-6)
    assert len({effect.kl_mean for effect in cells.values()}) == len(cells)  # each cell its own edit
    for result in results:  # the layer's own stages, named as the edit, no error finding
        assert result.record.variant.name == "ablate_head(head=all, mode=zero)"
        assert not [f for f in result.record.findings if f.severity == "error"]


def test_a_list_of_heads_patched_one_at_a_time_equals_a_hand_written_patch(tiny_gpt2) -> None:
    model, ids, other = eager_model(tiny_gpt2)
    kept = []
    hook = model.transformer.h[0].attn.c_proj.register_forward_pre_hook(lambda _m, args: kept.append(args[0].clone()))
    with torch.no_grad():
        model(input_ids=other, use_cache=False)
    hook.remove()

    def patch(head: int):
        def edit(context):  # (1, T, d): head `head`'s columns from the other text's run
            context = context.clone()
            context[..., head * HS:(head + 1) * HS] = kept[0][..., head * HS:(head + 1) * HS]
            return context
        return edit

    record = attnlab.run(overrides=[*_words(tiny_gpt2, "0"), *QUIET],
                         intervene={"name": "patch", "head": [2, 0], "text": OTHER}).record
    assert record.model.edited_heads == [2, 0] and record.variant.name == f"patch(head=[2,0], text='{OTHER}')"
    for head, effect in zip(record.model.edited_heads, record.model.head_effects):
        assert effect.kl_mean == pytest.approx(effect_by_hand(model, ids, 0, patch(head))["kl_mean"], rel=1e-6)
        assert effect.kl_mean > 1e-4


def test_scaled_scores_one_head_at_a_time_equal_the_single_edits(tiny_gpt2) -> None:
    record = attnlab.run(overrides=[*_words(tiny_gpt2, "1"), *QUIET],
                         intervene={"name": "scale_scores", "head": "all", "factor": 0.0}).record
    for head in (0, 3):
        single = attnlab.run(overrides=[*_words(tiny_gpt2, "1"), *QUIET],
                             intervene={"name": "scale_scores", "head": head, "factor": 0.0}).record
        assert record.model.head_effects[head] == single.model.effect


def test_the_run_writes_one_grid_its_cells_the_records(tiny_gpt2, tmp_path, capsys) -> None:
    out = tmp_path / "run"
    results = attnlab.run(overrides=[*_words(tiny_gpt2, "all"), "log.tensorboard=false", "log.html=false",
                                     "log.terminal=true"],
                          intervene={"name": "ablate_head", "head": "all"}, out_dir=out)
    with (out / "effect_by_layer_and_head.csv").open() as handle:
        rows = list(csv.reader(handle))
    assert rows[0] == ["layer", *(f"head {h}" for h in range(N_HEAD))]
    written = {(int(row[0]), head): float(value) for row in rows[1:] for head, value in enumerate(row[1:])}
    assert written == {cell: effect.kl_mean for cell, effect in _cells(results).items()}
    assert (out / "effect_by_layer_and_head.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    printed = capsys.readouterr().out
    top = max(written, key=written.get)
    assert f"largest: layer {top[0]} head {top[1]} ({written[top]:.4g})" in printed


@pytest.mark.parametrize("block, message", [
    ({"name": "observe", "head": "all"}, "intervene.head=all: intervene=observe makes no edit per head; one edit "
                                         "per head is for ablate_head, scale_scores, patch"),
    ({"name": "ablate_head", "head": []}, "intervene.head=[]: must be head indices (0, 1, ...), a list of them or all"),
    ({"name": "ablate_head", "head": [0, -1]},
     "intervene.head=[0, -1]: must be head indices (0, 1, ...), a list of them or all"),
    ({"name": "ablate_head", "head": "some"}, "intervene.head=some: must be a head index (0, 1, ...), a list of them or all"),
])
def test_a_mistaken_list_of_heads_is_one_line(block, message) -> None:
    with pytest.raises(UserError) as raised:
        intervention(block)
    assert str(raised.value) == message


def test_a_head_of_the_list_out_of_range_is_refused_before_the_model_loads(tiny_gpt2, monkeypatch) -> None:
    def refused(*_args, **_kwargs):
        raise AssertionError("the model was loaded before the request was checked")
    monkeypatch.setattr(model_job, "load_models", refused)
    with pytest.raises(UserError, match=r"^intervene.head=7: the model has 4 heads \(0 to 3\)$"):
        attnlab.run(overrides=[*_words(tiny_gpt2, "all"), *QUIET], intervene={"name": "ablate_head", "head": [1, 7]})


@pytest.mark.slow
def test_the_command_line_refuses_a_head_out_of_range_in_one_line_with_no_folder(tiny_gpt2, tmp_path) -> None:
    proc = subprocess.run([sys.executable, "-m", "attnlab", *_words(tiny_gpt2, "all"), "intervene=ablate_head",
                           "intervene.head=[0,7]"], capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stderr.strip() == "attnlab: error: intervene.head=7: the model has 4 heads (0 to 3)"
    assert not (tmp_path / "runs").exists()
