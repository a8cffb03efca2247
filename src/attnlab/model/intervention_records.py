"""The records of an intervention (attnlab.model.interventions): per chosen layer, the edited
layer's stages against its own, the findings, and what the edit does to the model's output.

The unmodified forward captures every chosen layer's own stages at once; each edit then costs one
more forward (the blocks before the layer replayed), in which the edited layer is captured.
`intervene=observe` edits nothing: one forward, each layer's stages and head patterns.
"""

from __future__ import annotations

import copy
from typing import Callable

from omegaconf import DictConfig, OmegaConf
from torch import Tensor

from attnlab.capture.every_layer import every_layer
from attnlab.capture.recorder import Capture
from attnlab.compute.pipeline import diagnosed
from attnlab.errors import UserError
from attnlab.model.forward import final_hidden
from attnlab.model.interventions import Intervention, contexts_on, edited
from attnlab.model.layer import ModelRun, own_head_patterns
from attnlab.model.loading import LoadedModel
from attnlab.model.stacks import Slot
from attnlab.modules.built import PluginError
from attnlab.record import Effect, ModelInfo, Pair, Record, Setup, record_of
from attnlab.schema import resolved


def intervention_records(cfg: DictConfig, chosen: Intervention, loaded: LoadedModel, run: ModelRun,
                         layers: list[int], slots: list[Slot], labels: dict, tokens: str,
                         say: Callable[[str], None], done: Callable[[Record, int, int], Record]) -> list[Record]:
    """One record per layer in `layers`; `tokens`: what the model's input is made of, for the record."""
    config, expect = resolved(cfg), OmegaConf.to_container(cfg.expect, resolve=True)
    other = _other_ids(chosen, loaded, run)
    records = []
    for layer in layers:
        slot = slots[layer]
        say(f"layer {slot.name}: {chosen.kind}")
        own = run.capture_own(layer, cfg.seed)
        own_name = f"{type(run.attention[layer][1]).__name__} (layer {slot.name})"
        setup = Setup(variant=chosen.label, seed=cfg.seed, config=copy.deepcopy(config), labels=labels[slot.stack],
                      n_tokens=run.n_tokens, d_in=run.sizes.width, d_out=run.sizes.width,
                      model=_about(loaded, run, slots, slot, layer, tokens))
        pair = Pair(reference=own_name, scratch=run.own.scratch if run.own else None)
        try:
            changed, effect = (own, None) if chosen.kind == "observe" else _edited_run(run, layer, chosen, other,
                                                                                       cfg.seed)
        except PluginError as exc:
            records.append(done(record_of(setup, pair, error=str(exc)), len(records), len(layers)))
            continue
        diagnosis = diagnosed(changed, own, shared=True, train=False, expect=expect, after=own_head_patterns(own))
        records.append(done(record_of(setup, pair, diagnosis, effect=effect), len(records), len(layers)))
    return records


def _edited_run(run: ModelRun, layer: int, chosen: Intervention, other: Tensor | None,
                seed: int) -> tuple[Capture, Effect]:
    """(the edited layer's capture, the edit's effect on the output) from one more forward."""
    attention = run.attention[layer][1]
    patched = None
    if other is not None:
        patched = contexts_on(lambda: final_hidden(run.loaded.module, other, run.loaded.hf), attention, run.sizes.heads)
    captured: list[Capture] = []
    with every_layer([attention], lambda _index, capture: captured.append(capture)):
        final = run.changed_final(layer, edited(attention, chosen, run.sizes.heads, patched), seed)
    return captured[-1], run.effects([final])[0]


def _other_ids(chosen: Intervention, loaded: LoadedModel, run: ModelRun) -> Tensor | None:
    """(1, T) the ids of the text a patch takes its values from: as many tokens as the run's."""
    if chosen.kind != "patch":
        return None
    import torch

    ids = loaded.tokenizer.encode(chosen.text)
    if len(ids) != run.ids.shape[1]:
        raise UserError(f"intervene.text is {len(ids)} tokens ({loaded.tokenizer.name}), inputs.text "
                        f"{run.ids.shape[1]}: a patch replaces position by position; give texts of as many tokens")
    return torch.tensor([ids], dtype=torch.long)  # (1, T)


def _about(loaded: LoadedModel, run: ModelRun, slots: list[Slot], slot: Slot, layer: int, tokens: str) -> ModelInfo:
    return ModelInfo(model=loaded.label, n_layers=sum(s.stack == slot.stack for s in slots),
                     parameters=loaded.n_parameters, tokenizer=tokens, heads=run.sizes.heads,
                     kv_heads=run.sizes.kv_heads, layer=slot.index, attention=run.attention[layer][0],
                     stack=slot.stack, replaced=slot.replaced)
