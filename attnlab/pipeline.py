"""One seed of one run: inputs and weights -> modules -> captured stages -> diagnosis -> a record.

Data flows one way. This module computes; it never prints or writes: sinks read the record.
A plugin that raises or returns something that is not a context matrix fails its own record
(status "failed", the error in one line) and nothing else.
"""

from __future__ import annotations

from typing import Any

import torch
from omegaconf import DictConfig, OmegaConf
from torch import nn

from attnlab.capture import Capture, capture
from attnlab.config import WeightsMode, resolved
from attnlab.diagnostics import compute_diagnostics, first_divergent_stage
from attnlab.findings import diagnose
from attnlab.inputs import Inputs
from attnlab.predictions import check_predictions
from attnlab.record import Record
from attnlab.registry import get_variant
from attnlab.weights import QKVWeights, load_shared, seeded_qkv

REFERENCE = "reference"


class PluginError(RuntimeError):
    """A variant that could not be built or run; it fails that record only."""


def build_module(
    name: str, params: dict[str, Any], d_in: int, d_out: int, seed: int, qkv: QKVWeights | None
) -> tuple[nn.Module, dict[str, str]]:
    """Build right after torch.manual_seed(seed), as the source does; then load the shared weights."""
    spec = get_variant(name)
    torch.manual_seed(seed)
    try:
        module = spec.cls(d_in, d_out, **{**spec.params, **params})
    except Exception as exc:
        raise PluginError(f"variant '{name}' could not be built: {type(exc).__name__}: {exc}") from exc
    loaded = load_shared(module, qkv) if qkv is not None else {}
    return module.eval(), loaded


def run_module(name: str, module: nn.Module, x: torch.Tensor) -> Capture:
    try:
        captured = capture(module, x)
    except Exception as exc:
        raise PluginError(f"variant '{name}' raised {type(exc).__name__}: {exc}") from exc
    context = captured.stages.get("context")
    if not isinstance(context, torch.Tensor) or context.dim() != 2 or context.shape[0] != x.shape[0]:
        shape = tuple(context.shape) if isinstance(context, torch.Tensor) else type(context).__name__
        raise PluginError(
            f"variant '{name}' returned {shape}; expected context vectors of shape (n_tokens={x.shape[0]}, d_out)"
        )
    return captured


def compute_record(cfg: DictConfig, seed: int, inputs: Inputs) -> Record:
    name = cfg.variant.name
    x = inputs.embeddings  # (n_tokens, d_in)
    config = resolved(cfg)
    config["seed"] = seed
    record = Record(
        variant=name, seed=seed, config=config, labels=inputs.labels,
        n_tokens=inputs.n_tokens, d_in=inputs.d_in, d_out=cfg.d_out,
    )
    shared = cfg.weights == WeightsMode.shared
    qkv = seeded_qkv(seed, inputs.d_in, cfg.d_out) if shared else None
    params = OmegaConf.to_container(cfg.variant.params, resolve=True)
    try:
        reference_module, _ = build_module(REFERENCE, {}, inputs.d_in, cfg.d_out, seed, qkv)
        variant_module, record.weights_loaded = build_module(name, params, inputs.d_in, cfg.d_out, seed, qkv)
        reference = run_module(REFERENCE, reference_module, x)
        variant = run_module(name, variant_module, x)
    except PluginError as exc:
        record.status, record.error = "failed", str(exc)
        return record
    record.stages, record.stage_shapes = _to_numpy(variant)
    record.reference_stages, record.reference_stage_shapes = _to_numpy(reference)
    record.diagnostics = compute_diagnostics(variant, reference)
    record.reference_diagnostics = compute_diagnostics(reference, reference)
    record.first_divergent_stage = first_divergent_stage(variant, reference)
    record.findings = diagnose(variant, reference, record.diagnostics, weights_shared=shared)
    record.predictions = check_predictions(
        cfg.expect, variant, record.diagnostics, record.first_divergent_stage, record.findings
    )
    return record


def _to_numpy(captured: Capture) -> tuple[dict, dict]:
    stages = {name: t.detach().cpu().float().numpy() for name, t in captured.stages.items()}
    return stages, {name: list(a.shape) for name, a in stages.items()}
