"""One layer of a model: its attention captured on what it really receives, a variant with the
layer's own parameters in its place, and what that does to the model's output."""

from __future__ import annotations

import copy
import tempfile
from collections.abc import Callable
from contextlib import ExitStack, nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from attnlab.capture.every_layer import every_layer
from attnlab.capture.recorder import Capture
from attnlab.capture.spill import as_numpy, spill
from attnlab.capture.stages import SQUARE_STAGES
from attnlab.compute.memory import SPILL_STAGE_BYTES
from attnlab.compute.pipeline import diagnosed, run_module
from attnlab.errors import UserError
from attnlab.model.config_variants import config_variant, is_own, takes_config
from attnlab.model.effect import output_effects
from attnlab.model.forward import AsLayerCalled, Final, InModel, LayerCall, final_hidden, output_head, replaced
from attnlab.model.head_patterns import head_patterns
from attnlab.model.inputs import ModelInputs
from attnlab.model.loading import LoadedModel
from attnlab.model.replay import BlockRecording
from attnlab.model.sizes import ModelSizes, constructor_values
from attnlab.model.user_metric import UserMetric
from attnlab.modules.built import BuiltModule, PluginError, plan
from attnlab.modules.layouts import LayoutError, Projections, load_projections, read_projections
from attnlab.modules.registry import get_variant
from attnlab.modules.roles import manual_seed
from attnlab.record import Effect, Finding, Pair, Record, Setup, record_of

STAND_IN = "multi_head_attention"  # the source's MultiHeadAttention
STAND_IN_TOLERANCE = 1e-5


@dataclass
class ModelRun:
    """One model on one text, its unmodified forward done once: what every layer's comparison shares."""

    loaded: LoadedModel
    attention: list[tuple[str, nn.Module]]  # (qualified name, module) per layer
    sizes: ModelSizes
    ids: Tensor  # (1, P) the ids at the compared logits' positions (the text; a decoder's input; an image's one)
    labels: list[str]
    base: Final  # the unmodified model's final hidden states (and its own logits)
    calls: dict[int, LayerCall] = field(default_factory=dict)  # what each compared layer received
    replay: BlockRecording | None = None  # the unmodified forward's blocks, replayed in a changed one
    given: dict[str, Any] | None = None  # the forward's arguments where they are not `ids` alone
    names: list[str] | None = None  # each layer as `layer=` names it (encoder.1); None: its index
    own: OwnCaptures | None = None  # each compared layer's own stages, captured in the unmodified forward
    metric: UserMetric | None = None  # intervene.metric: measured in each changed run's effect
    lengths: tuple[int, ...] | None = None  # a padded batch: each text's tokens, its pads never scored

    def layer_name(self, layer: int) -> str:
        return self.names[layer] if self.names else str(layer)

    @property
    def n_tokens(self) -> int:
        """The tokens the compared layers' attention sees."""
        return next(iter(self.calls.values())).hidden.shape[1]

    @classmethod
    def start(cls, loaded: LoadedModel, attention: list[tuple[str, nn.Module]], sizes: ModelSizes,
              ids: list[int] | ModelInputs, labels: list[str], layers: list[int], replay: bool = False,
              own: OwnCaptures | None = None) -> ModelRun:
        """`ids`: the text's, or what the model is given (attnlab.model.inputs); `replay`: keep the
        blocks' outputs for the changed forwards (attnlab.model.replay); `own`: where the chosen
        layers' own stages go, captured in that same forward (attnlab.capture.every_layer)."""
        inputs = ids if isinstance(ids, ModelInputs) else None
        token_ids = inputs.scored if inputs else torch.tensor([ids], dtype=torch.long)  # (1, P)
        given = inputs.given if inputs else None
        recording = BlockRecording.of([name for name, _ in attention]) if replay else None
        with ExitStack() as watching:
            if recording:
                watching.enter_context(recording.recording(loaded.module, max(layers)))
            if own:
                watching.enter_context(every_layer([attention[layer][1] for layer in own.layers], own.keep))
            try:
                base, calls = final_hidden(loaded.module, token_ids, loaded.hf, [m for _, m in attention],
                                           set(layers), given)
            except Exception as exc:
                _own_failure(loaded, token_ids, given, exc)
                raise
        return cls(loaded, attention, sizes, token_ids, labels, base, calls, recording, given, own=own,
                   lengths=inputs.lengths if inputs else None)

    def projections(self, layer: int) -> Projections:
        return read_projections(self.attention[layer][1], num_heads=self.sizes.heads, num_kv_heads=self.sizes.kv_heads)

    def capture_own(self, layer: int, seed: int) -> Capture:
        """The layer's own attention, captured on the hidden states, mask and position embeddings it
        received: in the unmodified forward when it was watched (handed over once), else called again."""
        if self.own is not None and layer in self.own.captures:
            return self.own.captures.pop(layer)
        call = self.calls[layer]
        return run_module(BuiltModule(self.attention[layer][1], AsLayerCalled(call)), call.hidden, seed)

    def changed_final(self, layer: int, in_model: nn.Module, seed: int) -> Final:
        """The final hidden states (and logits) of the model run again with `in_model` in place of the
        layer's attention (the blocks before it replayed, when recorded)."""
        name = self.attention[layer][0]
        replaying = self.replay.replaying(self.loaded.module, layer) if self.replay else nullcontext()
        manual_seed(seed)
        with replaced(self.loaded.module, name, in_model), replaying:
            try:
                return final_hidden(self.loaded.module, self.ids, self.loaded.hf, given=self.given)[0]
            except Exception as exc:  # noqa: BLE001 - the variant inside the model: fails its record only
                raise PluginError(f"the model with this variant at layer {self.layer_name(layer)} raised {type(exc).__name__}: {exc}") from exc

    def effects(self, changed: list[Final]) -> list[Effect]:
        """What each changed run does to the output, against the unmodified run."""
        return output_effects(output_head(self.loaded.module), self.base, changed, self.ids, scaling=self.sizes.logits,
                              metric=self.metric, lengths=self.lengths)


def _own_failure(loaded: LoadedModel, token_ids: Tensor, given: dict[str, Any] | None, exc: Exception) -> None:
    """A forward that failed while attnlab watched it, run again unwatched: where the model fails alone
    (a config transformers cannot run at these sizes), one line says so; else attnlab's error stands."""
    try:
        with torch.no_grad():
            loaded.module(**given) if given else loaded.module(input_ids=token_ids, use_cache=False) \
                if loaded.hf else loaded.module(token_ids)
    except Exception as own:  # noqa: BLE001 - the model's own error, named in one line
        message = " ".join(f"{type(own).__name__}: {own}".split())[:200]
        raise UserError(f"{loaded.label}: the model's own forward fails on these inputs, before attnlab changes "
                        f"anything: {message}") from exc


class OwnCaptures:
    """The compared layers' captures from one forward: handed to `consume(layer, capture)` as each
    is made (a record made at once: one layer's stages in memory at a time), or kept until each
    record takes its own, their square stages spilled to a folder (kept with the records) once the
    kept ones pass a stage's spill size, so every layer of a long text does not sit in memory at once."""

    def __init__(self, layers: list[int], consume: Callable[[int, Capture], None] | None = None) -> None:
        self.layers = layers
        self.consume = consume
        self.captures: dict[int, Capture] = {}
        self.kept_bytes = 0
        # one folder per spilled layer, kept with its record (which may spill its other stages there)
        self.folders: dict[int, tempfile.TemporaryDirectory[str]] = {}

    def keep(self, index: int, captured: Capture) -> None:
        if self.consume is not None:
            self.consume(self.layers[index], captured)
            return
        square = sum(captured.stages[name].nbytes for name in SQUARE_STAGES if name in captured.stages)
        layer = self.layers[index]
        if self.kept_bytes + square > SPILL_STAGE_BYTES:
            self.folders[layer] = tempfile.TemporaryDirectory(prefix="attnlab-spill-")
            spill(captured.stages, SQUARE_STAGES, Path(self.folders[layer].name), prefix="reference-own-")
        else:
            self.kept_bytes += square
        self.captures[layer] = captured

    def scratch(self, layer: int) -> tempfile.TemporaryDirectory[str] | None:
        """The folder `layer`'s spilled stages are in, if they were spilled."""
        return self.folders.get(layer)


def model_variant(run: ModelRun, layer: int, name: str, params: dict[str, Any], seed: int
                  ) -> tuple[BuiltModule, dict[str, str]]:
    """(the variant built for the layer's sizes holding the layer's own parameters, how each was
    loaded). A class built from the model's config is called as the layer was; `own:CLASS` is a copy
    of the layer's own module (its class, constructor arguments and state_dict, whatever its layout)."""
    own = run.attention[layer][1]
    if is_own(name):
        copied = copy.deepcopy(own).eval()
        return BuiltModule(copied, AsLayerCalled(run.calls[layer])), {key: "the layer's own" for key in own.state_dict()}
    projections = run.projections(layer)
    spec = get_variant(name)
    if takes_config(spec.cls):
        module, loaded = config_variant(spec.cls, run.loaded.config, params, own, layer, projections,
                                        run.sizes.heads, seed)
        return BuiltModule(module, AsLayerCalled(run.calls[layer])), loaded
    values = constructor_values(run.sizes, projections.b_query is not None, run.n_tokens)
    built = plan(name, values, params).build(seed)
    load_qkv = getattr(built.module, "load_qkv", None)
    if load_qkv is not None:  # a plugin with a layout of its own loads the matrices itself
        with torch.no_grad():
            load_qkv(projections.W_query, projections.W_key, projections.W_value)
        return built, {"load_qkv": "plugin loader"}
    try:
        loaded = load_projections(built.module, projections, num_heads=run.sizes.heads,
                                  num_kv_heads=built.kv_heads_for(run.sizes.heads))
    except LayoutError as exc:
        raise PluginError(f"variant '{name}': the layer's parameters do not load: {exc}") from exc
    built.module.eval()
    return built, loaded


def in_model(run: ModelRun, layer: int, built: BuiltModule) -> InModel:
    """The module that puts the variant in the layer's place, taking what the layer took."""
    call = run.calls[layer]
    if isinstance(built.convention, AsLayerCalled):
        return InModel(built.module, call.returned, True, True)
    return InModel(built.module, call.returned, built.takes_batches(run.sizes.width, run.n_tokens, run.sizes.width),
                   passed_on=call.passed_on, as_list=call.as_list)


def run_variant(run: ModelRun, layer: int, built: BuiltModule, batched: bool, seed: int) -> Capture:
    """The variant captured on the layer's real input (`batched`: as InModel takes it)."""
    return run_module(built, _as_taken(run.calls[layer].hidden, batched), seed)


def _as_taken(hidden: Tensor, batched: bool) -> Tensor:
    return hidden if batched else hidden[0]  # (1, T, d) or (T, d)


def layer_reference(run: ModelRun, layer: int, reference_name: str, seed: int) -> tuple[str, Capture]:
    """(its name, its capture): the layer's own attention (`reference=auto`), or a named variant
    holding the layer's parameters. When capture cannot see inside the layer's own module (a kernel
    it cannot read), attnlab's multi_head_attention with the layer's parameters stands in for it,
    only if its output equals the layer's own on these hidden states."""
    own_name = f"{type(run.attention[layer][1]).__name__} (layer {run.layer_name(layer)})"
    if reference_name != "auto":
        built, _ = model_variant(run, layer, reference_name, {}, seed)
        capture = run_variant(run, layer, built, in_model(run, layer, built).batched, seed)
        return f"{reference_name} with the parameters of {own_name}", capture
    own = run.capture_own(layer, seed)
    if not own.missing:
        return own_name, own
    try:
        built, _ = model_variant(run, layer, STAND_IN, {}, seed)
        stand_in = run_module(built, run.calls[layer].hidden, seed)
    except (PluginError, LayoutError):  # a layout the stand-in cannot hold (multi-head latent attention's)
        return own_name, own
    gap = float((stand_in.stages["output"] - own.stages["output"]).abs().max())
    scale = float(own.stages["output"].abs().max())
    if gap > STAND_IN_TOLERANCE * max(scale, 1.0):
        return own_name, own
    return f"{STAND_IN} standing in for {own_name} (same output within {gap:.1e})", stand_in


def own_head_patterns(reference: Capture) -> list[Finding]:
    """What the layer's own heads do (attnlab.model.head_patterns), read from its captured weights."""
    weights = reference.stages.get("weights")
    return head_patterns(as_numpy(weights) if weights is not None else None,
                         reference.lengths[0] if reference.lengths else None)


@dataclass
class Changed:
    """One layer with the variant in its place and the model run again (or why that failed)."""

    layer: int
    final: Final | None = None  # the changed run's final hidden states and logits
    error: str | None = None


def changed_layer(run: ModelRun, layer: int, name: str, params: dict[str, Any], seed: int) -> Changed:
    """The model run with the variant (built for the layer, holding its parameters) at `layer`.
    The built variant is let go (kept for every layer it would hold every layer's attention weights
    at once): compare_layer builds it again, from the same seed, to capture it."""
    try:
        built, _ = model_variant(run, layer, name, params, seed)
        return Changed(layer, final=run.changed_final(layer, in_model(run, layer, built), seed))
    except PluginError as exc:
        return Changed(layer, error=str(exc))


def compare_layer(run: ModelRun, changed: Changed, effect: Effect | None, setup: Setup, name: str,
                  params: dict[str, Any], seed: int, expect: Any, reference_name: str = "auto") -> Record:
    """The record of one layer: the variant's and the layer's own stages, the findings and `effect`
    (what `changed` does to the output; None when the changed run failed)."""
    layer = changed.layer
    pair = Pair()
    try:  # each step that fails the record keeps what the steps before it found
        reference_label, reference = layer_reference(run, layer, reference_name, seed)
        pair = Pair(reference=reference_label)
        built, weights_loaded = model_variant(run, layer, name, params, seed)
        pair = Pair(reference=reference_label, weights_loaded=weights_loaded, origin="" if is_own(name) else get_variant(name).origin,
                    scratch=run.own.scratch(layer) if run.own else None)  # the folder its spilled stages are in
        variant = run_variant(run, layer, built, in_model(run, layer, built).batched, seed)
        if changed.error is not None:
            raise PluginError(changed.error)
    except PluginError as exc:
        return record_of(setup, pair, error=str(exc))
    diagnosis = diagnosed(variant, reference, shared=True, train=False, expect=expect,
                          after=own_head_patterns(reference))
    return record_of(setup, pair, diagnosis, effect=effect)
