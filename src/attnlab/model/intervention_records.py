"""The records of an intervention (attnlab.model.interventions): per chosen layer, the edited
layer's stages against its own, the findings, and what the edit does to the model's output.

The unmodified forward captures every chosen layer's own stages at once; each edit then costs one
more forward (the blocks before the layer replayed), in which the edited layer is captured.
`intervene=observe` edits nothing: one forward, each layer's stages and head patterns.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import torch
from torch import Tensor, nn

from attnlab.capture.every_layer import every_layer
from attnlab.capture.recorder import Capture
from attnlab.compute.pipeline import diagnosed
from attnlab.errors import UserError
from attnlab.model.edit_findings import edit_findings
from attnlab.model.edits import KINDS
from attnlab.model.edits.head_hooks import contexts_on
from attnlab.model.forward import final_hidden
from attnlab.model.inputs import ModelInputs
from attnlab.model.interventions import Intervention, edited
from attnlab.model.layer import ModelRun, OwnCaptures, own_head_patterns
from attnlab.model.loading import LoadedModel
from attnlab.model.request import ModelRequest
from attnlab.model.sizes import ModelSizes
from attnlab.model.stacks import Slot
from attnlab.model.user_metric import user_metric
from attnlab.modules.built import PluginError
from attnlab.record import Effect, ModelInfo, Pair, Record, Setup, record_of


@dataclass
class _Recorded:
    """What every layer's record of one run shares, and the records made so far."""

    request: ModelRequest
    chosen: Intervention
    loaded: LoadedModel
    sizes: ModelSizes
    attention: list[tuple[str, nn.Module]]
    slots: list[Slot]
    labels: dict[str | None, list[str]]
    tokens: str  # what the model's input is made of
    done: Callable[[Record, int, int], Record]
    n_layers: int
    records: list[Record] = field(default_factory=list)
    own: OwnCaptures | None = None  # where the run's spilled stages are, kept with the records
    lengths: tuple[int, ...] | None = None  # a padded batch's texts' tokens: the captures' statistics skip the pads

    def add(self, layer: int, own: Capture, changed: Capture | None, effect: Effect | None,
            error: str | None = None, heads: dict[int, Effect] | None = None) -> None:
        """The record of `layer`: `changed` (the edited layer's capture) against `own`, or `error`;
        `heads`: a sweep's effect of each head edited alone (the layer's stages then its own)."""
        slot, module = self.slots[layer], self.attention[layer][1]
        for capture in (own, changed):
            if capture is not None:
                capture.lengths = self.lengths
        about = ModelInfo(model=self.loaded.label, n_layers=sum(s.stack == slot.stack for s in self.slots),
                          parameters=self.loaded.n_parameters, tokenizer=self.tokens, heads=self.sizes.heads,
                          kv_heads=self.sizes.kv_heads, layer=slot.index, attention=self.attention[layer][0],
                          stack=slot.stack, replaced=slot.replaced,
                          edited_heads=None if heads is None else list(heads),
                          head_effects=None if heads is None else list(heads.values()))
        setup = Setup(variant=self.chosen.label, seed=self.request.seed, config=copy.deepcopy(self.request.config),
                      labels=self.labels[slot.stack], n_tokens=own.stages["inputs"].shape[-2],
                      d_in=self.sizes.width, d_out=self.sizes.width, model=about)
        pair = Pair(reference=f"{type(module).__name__} (layer {slot.name})",
                    scratch=self.own.scratch(layer) if self.own else None)
        if error is not None:
            record = record_of(setup, pair, error=error)
        else:
            assert changed is not None  # a layer without an error has its edited capture
            edit = None if changed is own else partial(edit_findings, self.chosen, changed, own)
            diagnosis = diagnosed(changed, own, shared=True, train=False, expect=self.request.expect,
                                  after=own_head_patterns(own), own_findings=edit)
            record = record_of(setup, pair, diagnosis, effect=effect)
        self.records.append(self.done(record, len(self.records), self.n_layers))


def intervention_records(request: ModelRequest, chosen: Intervention, loaded: LoadedModel, start: Callable[..., Any],
                         tokens: str, say: Callable[[str], None], done: Callable[[Record, int, int], Record]
                         ) -> list[Record]:
    """One record per chosen layer. `start(consume)`: the unmodified forward (attnlab.model.model_run.model_run),
    `consume` told of each layer's stages as they are captured; `tokens`: what the input is made of."""
    recorded: list[_Recorded] = []

    def recording(sizes: ModelSizes, attention: list[Any], layers: list[int], slots: list[Slot],
                  inputs: ModelInputs) -> _Recorded:
        recorded.append(_Recorded(request, chosen, loaded, sizes, attention, slots, inputs.labels, tokens, done,
                                  len(layers), lengths=inputs.lengths))
        return recorded[0]

    if not KINDS[chosen.kind].changes:  # no edit: each layer's record made as its stages are captured: one in memory at a time
        def consume(sizes: ModelSizes, attention: list[Any], layers: list[int], slots: list[Slot],
                    inputs: ModelInputs) -> Callable[[int, Capture], None]:
            each = recording(sizes, attention, layers, slots, inputs)
            return lambda layer, own: each.add(layer, own, own, None)

        say("model: every layer, one forward")
        start(consume)
        return recorded[0].records
    run, layers, slots, inputs = start(None)
    run.metric = None if chosen.metric is None else user_metric(chosen.metric)
    each = recording(run.sizes, run.attention, layers, slots, inputs)
    each.own = run.own
    other = _other_ids(chosen, loaded, run)
    if chosen.each_head is not None:
        _each_head(each, run, layers, chosen, other, request.seed, say)
        return each.records
    for layer in layers:
        say(f"layer {slots[layer].name}: {chosen.kind}")
        own = run.capture_own(layer, request.seed)
        try:
            changed, effect = _edited_run(run, layer, chosen, other, request.seed)
        except PluginError as exc:
            each.add(layer, own, None, None, str(exc))
            continue
        each.add(layer, own, changed, effect)
    return each.records


def _each_head(each: _Recorded, run: ModelRun, layers: list[int], chosen: Intervention, other: Tensor | None,
               seed: int, say: Callable[[str], None]) -> None:
    """A layer x head sweep in this one run: per layer, its own stages (from the unmodified forward) and
    one forward per head edited alone, its effect only (a cell of the grid: no capture, no diagnosis)."""
    heads = chosen.heads(run.sizes.heads)
    for layer in layers:
        say(f"layer {run.layer_name(layer)}: {chosen.kind}, {len(heads)} heads one at a time")
        own = run.capture_own(layer, seed)
        attention = run.attention[layer][1]
        patched = _patched(run, attention, other)
        effects = {}
        try:
            for head in heads:
                in_model = edited(attention, chosen.one(head), run.sizes.heads, patched, run.lengths)
                effects[head] = run.effects([run.changed_final(layer, in_model, seed)])[0]
        except PluginError as exc:
            each.add(layer, own, None, None, str(exc))
            continue
        each.add(layer, own, own, None, heads=effects)


def _patched(run: ModelRun, attention: nn.Module, other: Tensor | None) -> Tensor | None:
    """(1, T, H, hs) the layer's context vectors on the patch's other text; None for another kind."""
    if other is None:
        return None
    return contexts_on(lambda: final_hidden(run.loaded.module, other, run.loaded.hf), attention, run.sizes.heads)


def _edited_run(run: ModelRun, layer: int, chosen: Intervention, other: Tensor | None,
                seed: int) -> tuple[Capture, Effect]:
    """(the edited layer's capture, the edit's effect on the output) from one more forward."""
    attention = run.attention[layer][1]
    patched = _patched(run, attention, other)
    captured: list[Capture] = []
    with every_layer([attention], lambda _index, capture: captured.append(capture)):
        final = run.changed_final(layer, edited(attention, chosen, run.sizes.heads, patched, run.lengths), seed)
    return captured[-1], run.effects([final])[0]


def _other_ids(chosen: Intervention, loaded: LoadedModel, run: ModelRun) -> Tensor | None:
    """(1, T) the ids of the text a patch takes its values from: as many tokens as the run's."""
    if not KINDS[chosen.kind].other_text:
        return None
    assert chosen.text is not None  # a kind that patches from another text needs intervene.text (checked with the request)
    ids = loaded.tokenizer.encode(chosen.text)
    if len(ids) != run.ids.shape[1]:
        raise UserError(f"intervene.text is {len(ids)} tokens ({loaded.tokenizer.name}), inputs.text "
                        f"{run.ids.shape[1]}: a patch replaces position by position; give texts of as many tokens")
    return torch.tensor([ids], dtype=torch.long)  # (1, T)
