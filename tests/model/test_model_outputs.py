"""What a run inside a model shows: report.html (the effect against the layer, each layer's head
grid of the model's own weights), TensorBoard (each measure at step=layer, the head grid per
layer), the layer folders; and the terminal through the real CLI."""

from __future__ import annotations

import base64
import io
import json
import re

import numpy as np
import pytest
from PIL import Image

import attnlab
from tests.model.conftest import N_LAYER, TEXT, write_learner


def test_layer_all_writes_a_record_per_layer_the_plots_and_the_head_grids(tiny_gpt2, tmp_path) -> None:
    results = attnlab.run("mha_scaled_by_d_out", out_dir=tmp_path, overrides=[
        f"model.path={tiny_gpt2}", "inputs=text", f"inputs.text='{TEXT}'", "layer=all"])
    records = [json.loads((tmp_path / f"layer-{layer}" / "record.json").read_text()) for layer in range(N_LAYER)]
    assert [r["model"]["layer"] for r in records] == list(range(N_LAYER))
    assert [r["model"]["effect"]["kl_mean"] for r in records] == pytest.approx(
        [r.record.model.effect.kl_mean for r in results])
    page = (tmp_path / "report.html").read_text()
    assert page.count('class="sweep-plot"') == 5 and 'data-key="layer"' in page  # each measure against the layer
    grids = re.findall(r'alt="head grid of layer (\d)" src="data:image/png;base64,([^"]+)"', page)
    assert [int(layer) for layer, _ in grids] == list(range(N_LAYER))  # the later layer's weights kept on disk
    assert Image.open(io.BytesIO(base64.b64decode(grids[1][1]))).format == "PNG"
    assert re.findall(r'alt="head 0 of layer (\d)"', page) == ["0", "1"]  # the shown head with the tokens as labels

    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(tmp_path), size_guidance={"images": 0})
    events.Reload()
    scalars = events.Scalars("effect/kl_mean")
    assert [s.step for s in scalars] == list(range(N_LAYER))
    assert [s.value for s in scalars] == pytest.approx([r["model"]["effect"]["kl_mean"] for r in records], rel=1e-6)
    assert [i.step for i in events.Images("heatmaps/model/weights")] == list(range(N_LAYER))


def test_the_record_keeps_the_models_own_weights_for_the_head_grid(tiny_gpt2) -> None:
    """The layer's input is the hidden states block 1 really hands its attention, and the weights are
    GPT-2's own on this text: checked against Hugging Face's output_hidden_states and output_attentions."""
    import torch
    from transformers import GPT2LMHeadModel

    from attnlab.inputs.text import gpt2_encoding

    result = attnlab.run("multi_head_attention", overrides=[f"model.path={tiny_gpt2}", "inputs=text",
                                                           f"inputs.text='{TEXT}'", "layer=1", "log.tensorboard=false"])
    model = GPT2LMHeadModel.from_pretrained(tiny_gpt2, attn_implementation="eager").eval()
    with torch.no_grad():
        out = model(torch.tensor([gpt2_encoding().encode(TEXT)]), output_attentions=True, output_hidden_states=True)
        layer_input = model.transformer.h[1].ln_1(out.hidden_states[1])  # what block 1 hands its attention
    np.testing.assert_allclose(result.stages["inputs"], layer_input.numpy(), atol=1e-6)
    np.testing.assert_allclose(result.reference_stages["weights"], out.attentions[1].numpy(), atol=1e-6)
    np.testing.assert_allclose(result.stages["weights"], out.attentions[1].numpy(), atol=1e-6)


@pytest.mark.slow
def test_the_terminal_names_the_model_the_layer_and_the_effect(app, tiny_gpt2) -> None:
    run = app(f"model.path={tiny_gpt2}", "variant=mha_scaled_by_d_out", "inputs=text", f"inputs.text='{TEXT}'",
              "layer=1", "log.tensorboard=false")
    assert run.returncode == 0, run.stderr
    lines = run.stdout.splitlines()
    assert lines[1].startswith(f"model: {tiny_gpt2} (3.32M parameters, 2 layers, 4 heads, 4 kv heads")
    assert lines[2] == "layer 1 of 2: transformer.h.1.attn against GPT2Attention (layer 1)"  # Conv1D's addmm read
    assert lines[3].startswith("effect on the model's output (14 tokens): KL mean ")
    assert "[scaling @ scaled_scores, all heads]" in run.stdout
    assert run.record["model"]["effect"]["kl_mean"] > 0


@pytest.mark.slow
def test_the_learners_check_through_the_cli(app, tiny_gpt2, tmp_path) -> None:
    folder = write_learner(tmp_path / "learner", tiny_gpt2, order="qvk", at=1)
    run = app("model=gpt_model", "model.weights=learner.safetensors", f"reference_model.path={tiny_gpt2}",
              "inputs=text", f"inputs.text='{TEXT}'", "log.tensorboard=false", cwd=folder)
    assert run.returncode == 0, run.stderr
    rows = {line.split()[0]: line for line in run.stdout.splitlines()[3:3 + N_LAYER]}
    assert "qkv_order@keys qkv_order@values" in rows["1"] and "qkv_order" not in rows["0"]
    assert "end to end, your model against the reference model" in run.stdout


@pytest.mark.slow
def test_a_pickle_is_refused_in_one_line(app, tmp_path) -> None:
    (tmp_path / "models").mkdir()
    (tmp_path / "models" / "gpt_model.py").write_text("import torch\n")
    run = app("model=gpt_model", "model.weights=ckpt.pth", "inputs=text", cwd=tmp_path)
    assert run.returncode == 2 and len(run.stderr.splitlines()) == 1
    assert "safetensors.torch.save_file(model.state_dict(), 'model.safetensors')" in run.stderr


def test_a_sweeps_table_shows_the_effect_on_the_predictions(tiny_gpt2, tmp_path) -> None:
    from attnlab.reporting.aggregate import find_record_files, load_records, terminal_table
    from attnlab.reporting.rows import records_table

    for name in ("multi_head_attention", "mha_scaled_by_d_out"):
        attnlab.run(name, out_dir=tmp_path / name, overrides=[f"model.path={tiny_gpt2}", "inputs=text",
                                                              f"inputs.text='{TEXT}'", "layer=1"])
    records, _ = load_records(find_record_files([tmp_path]))
    table = terminal_table(records_table(sorted(records, key=lambda r: r.variant.name)), width=200).splitlines()
    assert "KL mean" in table[0] and "top-1" in table[0]
    assert table[1].split()[0] == "mha_scaled_by_d_out" and table[2].split()[-2:] == ["0", "1"]
