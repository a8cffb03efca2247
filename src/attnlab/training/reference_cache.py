"""The trained reference, kept for the other jobs of a sweep: every variant's job of a seed trains
the same reference from the same start on the same batches, so the first job's result (its losses,
evaluations and final parameters) serves the rest. Parameters are stored as safetensors, as the
jobs' checkpoints are (never pickle); a file is written under a temporary name and renamed, so a
job never reads half of one. A reference killed mid-training resumes from its job's checkpoint
(attnlab.training.checkpoint) and is cached once complete."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

from safetensors.torch import load as load_tensors
from safetensors.torch import save as save_tensors
from torch import nn

from attnlab.training.head_probes import HEAD_WEIGHTS

FOLDER = ".training-cache"


def cache_key(settings: dict[str, Any], seed: int, reference: str, device: str) -> str:
    """What decides the trained reference: the training settings, the seed, its class and the device."""
    text = json.dumps({"settings": settings, "seed": seed, "reference": reference, "device": device}, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def load(folder: Path, key: str, model: nn.Module) -> dict[str, Any] | None:
    """The cached side (losses, evaluations) with `model` set to its trained parameters; None if absent."""
    side_file, state_file = folder / f"{key}.json", folder / f"{key}.safetensors"
    if not (side_file.exists() and state_file.exists()):
        return None
    model.load_state_dict(load_tensors(state_file.read_bytes()), strict=True)
    side: dict[str, Any] = json.loads(side_file.read_text())
    return side


def save(folder: Path, key: str, side: dict[str, Any], model: nn.Module) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    partial = folder / f"{key}.{os.getpid()}.partial"
    state = {name: value.detach().cpu().contiguous().clone() for name, value in model.state_dict().items()}
    partial.write_bytes(save_tensors(state))  # copies: safetensors refuses tensors that share storage
    os.replace(partial, folder / f"{key}.safetensors")
    partial.write_text(json.dumps({k: v for k, v in side.items() if k != HEAD_WEIGHTS}))  # arrays: the job's own
    os.replace(partial, folder / f"{key}.json")  # last: its presence says the parameters are complete
