"""One seed of one run: inputs and weights -> modules -> captured stages -> diagnosis -> a record.

Data flows one way. This module computes; it never prints or writes: sinks read the record.
A plugin that raises or returns something that is not a context matrix fails its own record
(status "failed", the error in one line) and nothing else.
"""

from __future__ import annotations

import copy
import os
import tempfile
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, NoReturn

import numpy as np
import torch
from torch import nn

from attnlab.capture.recorder import Capture, capture
from attnlab.capture.spill import as_numpy, spill
from attnlab.capture.stages import SQUARE_STAGES, canonical_tokens
from attnlab.compute.memory import Size, check_fits, should_spill
from attnlab.compute.observable import unobservable
from attnlab.compute.profile import profile_pair
from attnlab.diagnosis import batch_mixing
from attnlab.diagnosis.analysis import analyse
from attnlab.diagnosis.diagnostics import expected_shapes
from attnlab.diagnosis.kv_granularity import align_kv_heads
from attnlab.diagnosis.predictions import check_predictions
from attnlab.diagnosis.returned_weights import returned_weights
from attnlab.diagnosis.stage_blocks import one_thread
from attnlab.errors import TokensNeeded, UserError, WidthNeeded
from attnlab.inputs.kinds import Inputs
from attnlab.modules.built import BuiltModule, Construction, PluginError, plan
from attnlab.modules.hf_record import OutsideInput
from attnlab.modules.layouts import align, output_width, seed_projections
from attnlab.modules.registry import CONSTRUCTOR_KEYS, auto_reference
from attnlab.modules.roles import QKV_ROLES, manual_seed, module_roles
from attnlab.process_state import own_torch
from attnlab.record import Diagnosis, Finding, Pair, Record, Setup, Side, record_of

SINGLE_THREAD_TOKENS = 1024  # below this many tokens every torch op runs on one thread (see compute_threads)
DTYPES = {"float32": torch.float32, "float64": torch.float64, "bfloat16": torch.bfloat16, "float16": torch.float16}


def resolved_device(name: str) -> str:
    """cpu, cuda or mps (attnlab.schema allows only these and auto); `auto` takes CUDA, then MPS,
    else the CPU. A device this machine lacks is a one-line error, not a fallback: published numbers
    must say where they ran."""
    mps = getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available()
    if name == "auto":
        return "cuda" if torch.cuda.is_available() else "mps" if mps else "cpu"
    if (name == "cuda" and not torch.cuda.is_available()) or (name == "mps" and not mps):
        raise UserError(f"device={name}: not available on this machine (device=cpu or device=auto)")
    return name


@dataclass(frozen=True)
class JobSpec:
    """What every seed of a job shares, read from the config once by the app
    (attnlab.app.job_settings.job_spec)."""

    name: str
    params: dict[str, Any]
    config: dict[str, Any]  # resolved; each record gets its own copy with its seed
    shared: bool
    weights_init: str
    d_out: int
    expect: Any
    values: dict[str, Any]  # the top-level keys passed by name to every module that takes them
    batch: int
    train: bool
    reference: str  # "auto" or a variant name
    reference_params: dict[str, Any]  # an explicit reference's params (top-level keys among them override its values)
    show: tuple[int, int]  # the batch item and head the sinks show
    dtype: str = "float32"  # the variant's; the reference runs in reference_dtype
    reference_dtype: str = "float32"
    device: str = "cpu"  # resolved: never "auto"
    profile: bool = False
    profile_budget_s: float = 1.0
    profile_backward: bool = False
    notes: tuple[str, ...] = ()  # what the run did other than asked, and why (a token count of the variant's own)
    # the sizes (d_in, d_out) the variant's class is built at when the run is at its projections' widths (WidthNeeded)
    variant_sizes: dict[str, int] | None = None


@contextmanager
def compute_threads(n_tokens: int) -> Iterator[None]:
    """One intra-op thread for small inputs, torch's default for large ones; restored after.

    At the book's size every op is microseconds of work, but an op that enters a parallel region
    (torch.softmax does, even on a 6x6 matrix) must wake the other OpenMP threads: on a shared
    2-core machine that costs a scheduler slice per softmax, thousands of times the work itself,
    and dominated a 6-token job's compute. The choice depends
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


def planned_size(spec: JobSpec, construction: Construction, inputs: Inputs) -> Size:
    """The run's size from the config alone, before any module is built (their mask buffers count)."""
    return Size(spec.batch, construction.num_heads, inputs.n_tokens, inputs.d_in, spec.d_out,
                context_length=construction.context_length)


def run_module(built: BuiltModule, x: torch.Tensor, seed: int) -> Capture:
    """The module's capture on a copy of `x`: a forward that changes its input in place changes
    neither `x` nor the other module's input, and its recorded inputs are `x` as given. Stages
    that require grad (a forward that enabled it) are detached for the diagnosis."""
    name = built.name
    manual_seed(seed)  # dropout in training mode draws from the seed: same seed, same record
    try:
        captured = capture(built, x.clone())
    except (OutsideInput, TokensNeeded, WidthNeeded):  # refused, as at the probe; a size of its own: the run's to decide
        raise
    except Exception as exc:
        raise PluginError(f"variant '{name}' raised {type(exc).__name__}: {exc}") from exc
    if "output" not in captured.stages:
        raise PluginError(f"variant '{name}' returned {captured.returned}, not a tensor of shape (n_tokens, ·) "
                          f"or (batch, n_tokens, ·); return the context vectors")
    captured.stages = {stage: t.detach() if isinstance(t, torch.Tensor) else t for stage, t in captured.stages.items()}
    tokens = canonical_tokens(x)  # (batch, n_tokens, d_in)
    if tokens is None:
        raise ValueError(f"inputs of shape {tuple(x.shape)}: expected (n_tokens, d_in) or (batch, n_tokens, d_in)")
    captured.stages["inputs"] = tokens
    return captured


class ExitCalled(Exception):
    """A forward called os._exit: in a single run it ended the command with its code and no record."""


@contextmanager
def exits_raise() -> Iterator[None]:
    """os._exit raises ExitCalled for the duration, in this process only (a child a forward forked
    still exits: its pid is not ours)."""
    owner, real_exit = os.getpid(), os._exit

    def refused(status: int) -> NoReturn:
        if os.getpid() != owner:
            real_exit(status)
        raise ExitCalled(f"os._exit({status}) called in forward; a module must return its context, not end the process")

    os._exit = refused
    try:
        yield
    finally:
        os._exit = real_exit


@dataclass
class _Side:
    """One module of the pair as a seed runs it: built, whether it takes batches, its input, its capture."""

    built: BuiltModule
    batched: bool
    x: torch.Tensor | None = None
    captured: Capture | None = None
    unobservable: str | None = None  # why its change cannot be seen at this size: then nothing is diagnosed

    @property
    def ran(self) -> tuple[torch.Tensor, Capture]:
        """Its input and capture, once _capture_pair has run it; asked before, it is attnlab's bug."""
        if self.x is None or self.captured is None:
            raise RuntimeError(f"'{self.built.name}' has not run yet")
        return self.x, self.captured


def compute_record(
    spec: JobSpec, seed: int, inputs: Inputs, *,
    phase: Callable[[str], None] | None = None, items: torch.Tensor | None = None,
) -> Record:
    """One seed's record of the job `spec`;
    `phase(name)` is told when each part starts, for a progress display; `items` (batch, n_tokens,
    d_in) are distinct batch items for a batched module, in place of the inputs stacked."""
    say = phase or (lambda _name: None)
    config = copy.deepcopy(spec.config)
    config["seed"] = seed
    setup = Setup(variant=spec.name, seed=seed, config=config, labels=inputs.labels, n_tokens=inputs.n_tokens,
                  d_in=inputs.d_in, d_out=spec.d_out, device=spec.device, dtype=spec.dtype, notes=list(spec.notes))
    pair = Pair(reference=spec.reference)  # "auto" until auto has chosen: a run failing before says so, not a name
    batch = items if items is not None else inputs.batched(spec.batch)  # (batch, n_tokens, d_in)
    values = {**spec.values, "d_in": inputs.d_in, "n_tokens": inputs.n_tokens}
    with compute_threads(inputs.n_tokens), exits_raise():  # a module's os._exit: its failed record
        try:  # each step that fails the record keeps what the steps before it found
            say("forward")
            variant, planned, spilling = _build_variant(spec, values, inputs, seed)
            pair = Pair(origin=planned.spec.origin,
                        reference=(auto_reference(planned.spec, variant.built.module, variant.batched)
                                   if spec.reference == "auto" else spec.reference))
            with own_torch():  # the reference with torch's own functions, whatever a plugin replaced
                reference, weights_loaded = _build_reference(spec, values, inputs, seed, pair.reference, variant)
            pair = replace(pair, weights_loaded=weights_loaded)
            scratch = _capture_pair(spec, variant, reference, inputs.embeddings, batch, seed, spilling)
            _check_comparable(variant, weights_loaded)
        except PluginError as exc:
            return record_of(setup, pair, error=str(exc))
        _check_shown(spec.show, variant.ran[1])
        say("diagnostics")
        with own_torch():
            diagnosis = _diagnose(spec, variant, reference, seed)
        profile = None
        if spec.profile:  # after the capture, on the plain modules: profiling never changes a diagnosed value
            say("profile")
            profile = profile_pair((variant.built, variant.ran[0]), (reference.built, reference.ran[0]),
                                   budget_s=spec.profile_budget_s, backward=spec.profile_backward,
                                   warmed_up=True)  # the capture ran both
    return record_of(setup, replace(pair, scratch=scratch), diagnosis, profile=profile)


def _check_comparable(variant: _Side, weights_loaded: Mapping[str, str]) -> None:
    """Refuse a pair of which nothing can be compared: the variant took none of the reference's query,
    key and value weights (its own layout does not fit: XLNet's (d_model, heads, head_dim) einsum
    parameters) and neither its scores nor its weights were captured, so every stage after the inputs
    differs by construction and no finding could say anything."""
    roles = module_roles(variant.built.module)
    own = {name: how for name, how in weights_loaded.items() if roles.get(name) in QKV_ROLES}
    missing = set(variant.ran[1].missing)
    if own and not any(how.startswith("shared") for how in own.values()) and {"scores", "weights"} <= missing:
        kept = ", ".join(f"{name} {how.removeprefix('native: ')}" for name, how in own.items() if how.startswith("native"))
        raise PluginError(f"nothing of {variant.built.name}'s attention can be compared with the reference: none of "
                          f"its query, key and value parameters takes the reference's weights ({kept}) and its "
                          f"scores and weights are not captured")


@one_thread()  # small ops only (initialising weights, a probe on 2 x 3 tokens): no thread to wake for each
def _build_variant(spec: JobSpec, values: dict[str, Any], inputs: Inputs,
                   seed: int) -> tuple[_Side, Construction, bool]:
    """The variant built under the seed, its construction, and whether the run spills its large
    stages to disk. Its constructor is filled once."""
    planned = plan(spec.name, {**values, **(spec.variant_sizes or {})}, spec.params)  # its class as asked
    size = planned_size(spec, planned, inputs)
    spilling = should_spill(size)
    check_fits(size, spilled=spilling)
    built = planned.build(seed)
    variant = _Side(built, built.takes_batches(inputs.d_in, inputs.n_tokens, spec.d_out),
                    unobservable=unobservable(planned.spec, size))
    return variant, planned, spilling


@one_thread()
def _build_reference(spec: JobSpec, values: dict[str, Any], inputs: Inputs, seed: int, name: str,
                     variant: _Side) -> tuple[_Side, dict[str, str]]:
    """The reference `name` built under the seed, the weights shared (how each loaded into the
    variant), both modules cast."""
    reference_values, reference_params = _reference_arguments(spec, values, variant.built)
    reference_planned = plan(name, reference_values, reference_params)
    reference_built = reference_planned.build(seed)
    reference = _Side(reference_built, reference_built.takes_batches(inputs.d_in, inputs.n_tokens, spec.d_out))
    num_heads = reference_planned.num_heads
    weights_loaded = {}
    if spec.shared:
        seed_projections(reference_built.module, seed, spec.weights_init, num_heads=num_heads)
        weights_loaded = _aligned(reference_built, variant.built, num_heads)
    for side in (reference, variant):
        side.built.module.train(spec.train)
    # built and seeded on the CPU in float32, then moved: a seed means the same numbers everywhere
    cast(reference_built.module, spec.device, DTYPES[spec.reference_dtype])
    cast(variant.built.module, spec.device, DTYPES[spec.dtype])
    return reference, weights_loaded


def _reference_arguments(spec: JobSpec, values: dict[str, Any],
                         variant: BuiltModule) -> tuple[dict[str, Any], dict[str, Any]]:
    """The reference's top-level keys and params: `auto`'s gets the variant's own key/value heads, and
    its own query heads where num_heads cannot reach them (`BuiltModule.own_num_heads`);
    either gets reference.params, the top-level keys among them overriding the run's
    (reference.params.attn_implementation=sdpa against an eager variant)."""
    if spec.reference == "auto":
        heads = variant.own_num_heads(spec.d_out) or values.get("num_heads")
        values = {**values, "num_kv_heads": variant.num_kv_heads, "num_heads": heads}
        narrower = variant.narrower_queries(spec.d_out)
        if narrower is not None:  # its queries in fewer or narrower heads than asked: the reference's as wide
            values = {**values, "d_out": narrower[0], "num_heads": narrower[1]}
    top = {k: v for k, v in spec.reference_params.items() if k in CONSTRUCTOR_KEYS}
    return {**values, **top}, {k: v for k, v in spec.reference_params.items() if k not in top}


def _aligned(reference: BuiltModule, variant: BuiltModule, num_heads: int) -> dict[str, str]:
    """The reference's weights in the variant; a plugin's own `load_qkv` that raises fails this
    record (its error in one line), as its forward would."""
    try:
        return align(reference.module, variant.module, num_heads=num_heads, num_kv_heads=variant.kv_heads_for(num_heads))
    except UserError:
        raise
    except Exception as exc:  # noqa: BLE001 - the plugin's loader: any error is its own
        message = " ".join(str(exc).split())
        raise PluginError(f"variant '{variant.name}' could not take the shared weights: {type(exc).__name__}: "
                          f"{message}") from exc


def _capture_pair(spec: JobSpec, variant: _Side, reference: _Side, tokens: torch.Tensor, batch: torch.Tensor,
                  seed: int, spilling: bool) -> tempfile.TemporaryDirectory[str] | None:
    """Both modules captured on their inputs: `tokens` (n_tokens, d_in) or `batch` (batch, n_tokens, d_in);
    the folder their spilled stages are in, kept as long as the record."""
    reference.x = _moved(batch if reference.batched else tokens, spec.device, spec.reference_dtype)
    variant.x = _moved(batch if variant.batched else tokens, spec.device, spec.dtype)
    with own_torch():
        reference.captured = run_module(reference.built, reference.x, seed)
    scratch = tempfile.TemporaryDirectory(prefix="attnlab-spill-") if spilling else None
    if scratch is not None:  # the reference's large stages go to disk: one module's stay in memory
        spill(reference.captured.stages, SQUARE_STAGES, Path(scratch.name))
    try:
        variant.captured = run_module(variant.built, variant.x, seed)
    except PluginError:
        if variant.batched or not reference.batched:
            raise
        # a batched module whose probe failed: its own error on the batch says why
        variant.captured = run_module(variant.built, _moved(batch, spec.device, spec.dtype), seed)
    if scratch is not None:  # the variant's too: the passes of the diagnosis read one stage at a time
        spill(variant.captured.stages, SQUARE_STAGES, Path(scratch.name), prefix="variant-")
    return scratch


def _diagnose(spec: JobSpec, variant: _Side, reference: _Side, seed: int) -> Diagnosis:
    """The stages, diagnostics, findings and predictions of the two captures."""
    (x, captured), (_, reference_captured) = variant.ran, reference.ran
    mixing = _batch_mixing(variant.built, x, captured, seed) if variant.batched and not spec.train else None
    diagnosis = diagnosed(captured, reference_captured, shared=spec.shared, train=spec.train,
                          expect=spec.expect, mixing=mixing, unobservable=variant.unobservable)
    width = output_width(variant.built.module) if spec.variant_sizes is not None else None
    predicted = diagnosis.expected_shapes.get("output")
    if width is not None and predicted:  # at a width of its own the class's output projection says the output's
        diagnosis = replace(diagnosis, expected_shapes={**diagnosis.expected_shapes, "output": [*predicted[:-1], width]})
    return diagnosis


@one_thread()  # op after op on one (batch item, head) block: no thread to wake for each
def diagnosed(mine: Capture, theirs: Capture, *, shared: bool, train: bool, expect: Any,
              mixing: batch_mixing.BatchMixing | None = None, unobservable: str | None = None,
              before: Sequence[Finding] = (), after: Sequence[Finding] = (),
              own_findings: Callable[[Sequence[Finding]], list[Finding]] | None = None) -> Diagnosis:
    """Both captures' stages, the diagnostics, the findings and the predictions (also for a layer
    inside a model, attnlab.model); keys and values compared at each side's kv heads, the captures
    themselves left as they are. `before`, `after`: findings only a model shows, around the
    diagnosis's own, the predictions checked against them all; `unobservable`: why the variant's
    change cannot be seen at this size, said instead of any finding; `own_findings`: what the
    diagnosis's own findings become (an intervention's record names its edit in their place)."""
    mine, theirs = align_kv_heads(mine, theirs, shared=shared)
    expected, weights = {k: list(v) for k, v in expected_shapes(theirs).items()}, returned_weights(mine)
    found = analyse(mine, theirs, weights_shared=shared, train=train, batch_mixing=mixing)
    findings = [*before, *(own_findings(found.findings) if own_findings else found.findings), *after]
    not_checked = [mixing.not_checked] if mixing is not None and mixing.not_checked else []
    if unobservable:
        findings, not_checked = [], [unobservable, *not_checked]
    return Diagnosis(
        variant=_captured_side(mine, found.diagnostics), reference=_captured_side(theirs, found.reference_diagnostics),
        expected_shapes=expected,
        missing_stages=list(mine.missing), reconstructed_stages=list(mine.reconstructed),
        output_is_context=mine.output_is_context,
        returned=mine.call.what if mine.call is not None else "",
        output_element=mine.call.element if mine.call is not None else None,
        returned_weights=weights,
        head_diagnostics=found.head_diagnostics, first_divergent_stage=found.first_divergent_stage,
        findings=findings, not_checked=not_checked,
        predictions=check_predictions(expect, mine, found.diagnostics, found.first_divergent_stage, findings))


def _batch_mixing(built: BuiltModule, x: torch.Tensor, together: Capture, seed: int) -> batch_mixing.BatchMixing | None:
    """Each batch item alone against its slice (eval mode only: dropout would differ per run)."""
    try:
        return batch_mixing.check(lambda item: run_module(built, item, seed), x, together)
    except PluginError:  # a module that cannot take a batch of one: nothing to compare
        return None


def cast(module: nn.Module, device: str, dtype: torch.dtype) -> None:
    """Move `module` to `device` and its real floating-point parameters and buffers to `dtype`.

    `Module.to(dtype)` would cast a complex buffer (Llama's RoPE `freqs_cis`) to a real dtype and
    drop its imaginary part; complex tensors keep their kind here, at the precision of `dtype`."""
    complex_dtype = torch.complex128 if dtype == torch.float64 else torch.complex64
    module.to(device)
    for param in module.parameters():
        if param.is_floating_point():
            param.data = param.data.to(dtype)
    for name, buffer in module.named_buffers():
        kind = dtype if buffer.is_floating_point() else complex_dtype if buffer.is_complex() else None
        if kind is not None and buffer.dtype != kind:
            owner, _, attribute = name.rpartition(".")
            setattr(module.get_submodule(owner), attribute, buffer.to(kind))


def _moved(x: torch.Tensor, device: str, dtype: str) -> torch.Tensor:
    return x.to(device=device, dtype=DTYPES[dtype])


def _check_shown(show: tuple[int, int], variant: Capture) -> None:
    weights = variant.stages.get("weights", variant.stages["output"][:, None])
    for key, index, count in (("show.batch", show[0], weights.shape[0]), ("show.head", show[1], weights.shape[1])):
        if not 0 <= index < count:
            what = "batch items" if key == "show.batch" else "heads"
            raise UserError(f"{key}={index}: the module has {count} {what} (0 to {count - 1})")


def _captured_side(captured: Capture, diagnostics: Mapping[str, float | None]) -> Side:
    """A capture's side of the record: the stages in the module's own rank (a view of the canonical
    values), their shapes, and the canonical view's shapes (`Side.canonical`)."""
    canonical = {name: as_numpy(t) for name, t in captured.stages.items()}
    shapes = {name: list(captured.native_shapes[name]) for name in canonical}
    stages: dict[str, np.ndarray | None] = {name: values.reshape(shapes[name]) for name, values in canonical.items()}
    views = {name: list(values.shape) for name, values in canonical.items()}
    return Side(stages=stages, shapes=shapes, canonical_shapes=views, diagnostics=dict(diagnostics))
