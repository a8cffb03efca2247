"""One seed of one run: inputs and weights -> modules -> captured stages -> diagnosis -> a record.

Data flows one way. This module computes; it never prints or writes: sinks read the record.
A plugin that raises or returns something that is not a context matrix fails its own record
(status "failed", the error in one line) and nothing else.
"""

from __future__ import annotations

import copy
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Callable, Iterator

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
from attnlab.weights import QKVWeights, load_shared, manual_seed, seeded_qkv

REFERENCE = "reference"
SINGLE_THREAD_TOKENS = 1024  # below this many tokens every torch op runs on one thread (see compute_threads)


@dataclass(frozen=True)
class JobSpec:
    """What every seed of a job shares, read from the config once: resolving a DictConfig costs
    ~10 ms, which 100 seeds should not pay 100 times."""

    name: str
    params: dict[str, Any]
    config: dict[str, Any]  # resolved; each record gets its own copy with its seed
    shared: bool
    weights_init: str
    d_out: int
    expect: Any

    @classmethod
    def from_cfg(cls, cfg: DictConfig) -> JobSpec:
        return cls(
            name=cfg.variant.name,
            params=OmegaConf.to_container(cfg.variant.params, resolve=True),
            config=resolved(cfg),
            shared=cfg.weights == WeightsMode.shared,
            weights_init=cfg.weights_init.value,
            d_out=cfg.d_out,
            expect=OmegaConf.to_container(cfg.expect, resolve=True),
        )


@contextmanager
def compute_threads(n_tokens: int) -> Iterator[None]:
    """One intra-op thread for small inputs, torch's default for large ones; restored after.

    At the book's size every op is microseconds of work, but an op that enters a parallel region
    (torch.softmax does, even on a 6x6 matrix) must wake the other OpenMP threads: on a shared
    2-core machine that costs a scheduler slice, measured at 8-12 ms per softmax against 3 us on
    one thread, which made a 6-token job's compute ~100 ms instead of ~10. The choice depends
    on n_tokens only, so a seed's numbers are the same in a single run and in an n_seeds job.
    """
    before = torch.get_num_threads()
    small = n_tokens < SINGLE_THREAD_TOKENS
    if small and before != 1:
        torch.set_num_threads(1)
    try:
        yield
    finally:
        if small and before != 1:
            torch.set_num_threads(before)


class PluginError(RuntimeError):
    """A variant that could not be built or run; it fails that record only."""


def build_module(
    name: str, params: dict[str, Any], d_in: int, d_out: int, seed: int, qkv: QKVWeights | None
) -> tuple[nn.Module, dict[str, str]]:
    """Build right after torch.manual_seed(seed), as the source does; then load the shared weights."""
    spec = get_variant(name)
    manual_seed(seed)
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


def compute_record(
    cfg: DictConfig | None, seed: int, inputs: Inputs, *, spec: JobSpec | None = None,
    phase: Callable[[str], None] | None = None,
) -> Record:
    """One seed's record. `spec` (JobSpec.from_cfg(cfg)) saves re-reading the config per seed;
    `phase(name)` is told when each part starts, for a progress display."""
    spec = spec or JobSpec.from_cfg(cfg)
    say = phase or (lambda _name: None)
    name = spec.name
    x = inputs.embeddings  # (n_tokens, d_in)
    config = copy.deepcopy(spec.config)
    config["seed"] = seed
    record = Record(
        variant=name, seed=seed, config=config, labels=inputs.labels,
        n_tokens=inputs.n_tokens, d_in=inputs.d_in, d_out=spec.d_out,
    )
    with compute_threads(inputs.n_tokens):
        qkv = seeded_qkv(seed, inputs.d_in, spec.d_out, spec.weights_init) if spec.shared else None
        try:
            say("forward")
            reference_module, _ = build_module(REFERENCE, {}, inputs.d_in, spec.d_out, seed, qkv)
            variant_module, record.weights_loaded = build_module(name, spec.params, inputs.d_in, spec.d_out, seed, qkv)
            reference = run_module(REFERENCE, reference_module, x)
            variant = run_module(name, variant_module, x)
        except PluginError as exc:
            record.status, record.error = "failed", str(exc)
            return record
        say("diagnostics")
        record.stages, record.stage_shapes = _to_numpy(variant)
        record.reference_stages, record.reference_stage_shapes = _to_numpy(reference)
        record.diagnostics = compute_diagnostics(variant, reference)
        record.reference_diagnostics = compute_diagnostics(reference, reference)
        record.first_divergent_stage = first_divergent_stage(variant, reference)
        record.findings = diagnose(variant, reference, record.diagnostics, weights_shared=spec.shared)
        record.predictions = check_predictions(
            spec.expect, variant, record.diagnostics, record.first_divergent_stage, record.findings
        )
    return record


def _to_numpy(captured: Capture) -> tuple[dict, dict]:
    stages = {name: t.detach().cpu().float().numpy() for name, t in captured.stages.items()}
    return stages, {name: list(a.shape) for name, a in stages.items()}
