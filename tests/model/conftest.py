"""Tiny models saved in temporary folders (nothing is downloaded), and the learner's folder."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from tests.model.learner import GPT_MODEL, gpt2_into_learner

TEXT = "Every effort moves you forward, and every step you take is a step"
N_LAYER, N_HEAD, N_EMBD, N_POSITIONS = 2, 4, 64, 64


def save_tiny_gpt2(folder: Path, seed: int = 0) -> Path:
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(seed)
    # a wider initialisation than GPT-2's 0.02: sharper attention and predictions, so a change shows
    config = GPT2Config(n_layer=N_LAYER, n_head=N_HEAD, n_embd=N_EMBD, n_positions=N_POSITIONS, initializer_range=0.2)
    model = GPT2LMHeadModel(config)
    with torch.no_grad():  # GPT-2 starts with zero biases and unit norms: a left-out bias would not show
        for name, param in model.named_parameters():
            if name.endswith("bias") or ".ln_" in name:
                param.add_(torch.randn_like(param) * 0.1)
    model.save_pretrained(folder)
    return folder


@pytest.fixture(scope="session")
def tiny_gpt2(tmp_path_factory) -> Path:
    return save_tiny_gpt2(tmp_path_factory.mktemp("models") / "tiny-gpt2")


def write_learner(folder: Path, hf_folder: Path, **mistake) -> Path:
    """./models/gpt_model.py and learner.safetensors in `folder`, loaded from `hf_folder`'s GPT-2."""
    from safetensors.torch import load_file, save_file

    (folder / "models").mkdir(parents=True, exist_ok=True)
    (folder / "models" / "gpt_model.py").write_text(GPT_MODEL)
    state = gpt2_into_learner(load_file(str(hf_folder / "model.safetensors")), N_LAYER, **mistake)
    save_file(state, str(folder / "learner.safetensors"))
    return folder
