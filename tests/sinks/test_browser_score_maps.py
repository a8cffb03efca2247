"""A model's score maps show its scores whatever its mask's fill: the colour bar of the
`scaled_scores` map in a model run's report, read off a Chromium screenshot by tesseract, spans
values within the unmasked scores. GPT-2, BERT and Llama built small from their configs and saved
with save_pretrained; GPT-2's own mask (the dtype's minimum) also put in as -1e4 and -1e9.

Expected values come from the model's own forward, run again in the test: the query and key its
`eager_attention_forward` is called with at layer 0, their product times its scaling, the
masked cells (the mask's) left out; the run edits head 0 (`scale_scores`, factor 0.5), so its
scores times 0.5 are shown too. Before the fix the bar read -3.4e+38 to 5.48 (GPT-2's fill)."""

from __future__ import annotations

import importlib
import re
import subprocess
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

import attnlab
from attnlab.reporting import heatmap
from tests._heatmap_ocr import _ONE_THREAD, _UPSCALE, TESSERACT
from tests.sinks.test_browser import BROWSER, screenshot, where_at_native_size

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(BROWSER is None, reason="no Chromium installed (apt-get install chromium)"),
    pytest.mark.skipif(TESSERACT is None, reason="no tesseract to read the pictures (apt-get install tesseract-ocr)"),
]

IDS = [464, 290, 110, 318, 257, 332, 286, 262, 634, 108, 290, 340]  # 12 tokens, below every vocabulary here
SMALL = {"vocab_size": 1000}
MODELS = {  # (modeling module, model class, config)
    "gpt2": ("gpt2", "GPT2LMHeadModel", dict(SMALL, n_layer=1, n_embd=64, n_head=4, n_positions=64)),
    "llama": ("llama", "LlamaForCausalLM", dict(SMALL, hidden_size=64, intermediate_size=128, num_hidden_layers=1,
                                                num_attention_heads=4, num_key_value_heads=4, max_position_embeddings=64)),
    "bert": ("bert", "BertLMHeadModel", dict(SMALL, hidden_size=64, intermediate_size=128, num_hidden_layers=1,
                                             num_attention_heads=4, max_position_embeddings=64)),
}
CASES = [("gpt2", None), ("gpt2", -1e4), ("gpt2", -1e9), ("llama", None), ("bert", None)]


def saved(name: str, folder: Path) -> Path:
    package, cls, config = MODELS[name]
    transformers = importlib.import_module("transformers")
    torch.manual_seed(0)
    getattr(transformers, cls)(transformers.AutoConfig.for_model(package, **config)).save_pretrained(folder)
    return folder


def filled(monkeypatch: pytest.MonkeyPatch, package: str, fill: float | None, seen: list) -> None:
    """The modeling module's eager attention, its mask's fill put in as `fill` (the model's own
    where None); each call's scaled scores and mask kept in `seen`."""
    module = importlib.import_module(f"transformers.models.{package}.modeling_{package}")
    original = module.eager_attention_forward

    def eager(attention, query, key, value, attention_mask, *args, **kwargs):
        if fill is not None and attention_mask is not None:
            attention_mask = torch.where(attention_mask == torch.finfo(attention_mask.dtype).min,
                                         torch.tensor(fill, dtype=attention_mask.dtype), attention_mask)
        scaling = kwargs.get("scaling", args[0] if args else None)
        scaling = query.size(-1) ** -0.5 if scaling is None else scaling
        seen.append(((query @ key.transpose(-1, -2) * scaling).detach(), attention_mask))  # (1, h, T, T)
        return original(attention, query, key, value, attention_mask, *args, **kwargs)

    monkeypatch.setattr(module, "eager_attention_forward", eager)


def unmasked_range(folder: Path, cls: str, seen: list) -> tuple[float, float, int]:
    """(least, largest, masked cells) of layer 0's scores, unedited and head 0's times 0.5, off the mask."""
    model = getattr(importlib.import_module("transformers"), cls).from_pretrained(folder, attn_implementation="eager")
    seen.clear()
    with torch.no_grad():
        model.eval()(torch.tensor([IDS]), use_cache=False)
    scores, mask = seen[0]
    kept = torch.ones_like(scores, dtype=torch.bool) if mask is None else (mask > -1e3).expand_as(scores)
    values = torch.cat([scores[kept], (scores[:, :1] * 0.5)[kept[:, :1]]])
    return float(values.min()), float(values.max()), int((~kept).sum())


def bar_labels(screen: np.ndarray, image: np.ndarray, work: Path) -> list[float]:
    """The numbers written beside the colour bar of `image` where it is on `screen`, read by tesseract."""
    top, left = where_at_native_size(image, screen)
    strip = heatmap._TICK_W + heatmap._MARGIN  # the ticks' band, right of the bar
    bar = image[:, image.shape[1] - strip - heatmap._BAR_W // 2].astype(int)  # a column down the bar
    coloured = np.concatenate([[0], (np.abs(bar - bar[0]).max(-1) > 40).astype(np.int8), [0]])
    starts, stops = np.flatnonzero(np.diff(coloured) == 1), np.flatnonzero(np.diff(coloured) == -1)
    longest = int(np.argmax(stops - starts))  # the bar: the longest run of rows off the background (not the title)
    first, last = top + starts[longest] - 8, top + stops[longest] + 8  # a tick's text is centred on the bar's end
    crop = Image.fromarray(screen[first:last, left + image.shape[1] - strip:left + image.shape[1]])
    crop = crop.convert("L").resize((crop.width * _UPSCALE, crop.height * _UPSCALE), Image.Resampling.LANCZOS)
    crop.save(work / "bar.png")
    text = subprocess.run([TESSERACT, str(work / "bar.png"), "stdout", "--psm", "6", "-c",
                           "tessedit_char_whitelist=-.0123456789e+"], capture_output=True, text=True, check=True,
                          timeout=120, env=_ONE_THREAD).stdout
    return [float(word) for word in re.findall(r"-?\d*\.?\d+(?:e[-+]?\d+)?", text)]


@pytest.mark.parametrize(("name", "fill"), CASES, ids=[f"{n}-{f or 'own'}" for n, f in CASES])
def test_the_score_maps_colour_bar_spans_the_unmasked_scores(name, fill, tmp_path, monkeypatch) -> None:
    package, cls, _ = MODELS[name]
    folder = saved(name, tmp_path / name)
    seen: list = []
    filled(monkeypatch, package, fill, seen)
    least, largest, masked = unmasked_range(folder, cls, seen)
    assert name == "bert" or masked > 0, "a causal model's layer masks the later tokens"
    out = tmp_path / "run"
    attnlab.run(overrides=[f"model.path={folder}", "layer=0", "inputs=ids", f"inputs.ids=[{','.join(map(str, IDS))}]",
                           "intervene=scale_scores", "intervene.factor=0.5", "intervene.head=0"],
                out_dir=out, log={"tensorboard": False, "terminal": False})
    screen = screenshot((out / "report.html").as_uri(), tmp_path / "shot.png", tmp_path / "profile", height=1600)
    for side in ("reference", "variant"):
        image = np.asarray(Image.open(out / "heatmaps" / side / "scaled_scores.png").convert("RGB"))
        labels = bar_labels(screen, image, tmp_path)
        assert len(labels) >= 2, f"{side}: the colour bar's ends not read: {labels}"
        low, high = min(labels), max(labels)
        slack = 0.01 * (largest - least)  # a tick is written to 3 significant digits
        assert least - slack <= low < high <= largest + slack, (
            f"{name} ({fill or 'its own fill'}), {side}: the bar reads {low:g} to {high:g}; the unmasked scores "
            f"are {least:.4g} to {largest:.4g}")
