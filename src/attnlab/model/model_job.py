"""A job inside a model: load it once, run it unmodified once, then one record per compared layer."""

from __future__ import annotations

import copy
import difflib
from collections.abc import Callable
from typing import Any

from omegaconf import DictConfig, OmegaConf

from attnlab.errors import UserError
from attnlab.inputs.token_ids import read_ids
from attnlab.model.declared_config import declared_config
from attnlab.model.default_variant import default_variant
from attnlab.model.edit_checks import check_batch_lengths, check_indices, check_patch_text
from attnlab.model.inputs import ModelInputs, encoder_decoder_inputs, image_inputs, text_inputs
from attnlab.model.intervention_records import intervention_records
from attnlab.model.interventions import Intervention, intervention
from attnlab.model.layer import ModelRun, OwnCaptures, changed_layer, compare_layer
from attnlab.model.layer_check import compute_check_records
from attnlab.model.loading import LoadedModel, evaluating, load_model
from attnlab.model.model_memory import check_model_fits
from attnlab.model.model_spec import OWN_KEYS, is_requested, model_spec
from attnlab.model.sizes import ModelSizes, model_sizes
from attnlab.model.stacks import Slot, chosen_slots, stacked_attention
from attnlab.model.tokens import fitting_ids, same_length, token_ids
from attnlab.model.variant_fit import check_variant_fits
from attnlab.modules.families import family
from attnlab.record import ModelInfo, Record, Setup
from attnlab.schema import resolved


def wants_model(cfg: DictConfig) -> bool:
    return is_requested(_block(cfg, "model"))


def _block(cfg: DictConfig, key: str) -> dict[str, Any]:
    node = OmegaConf.select(cfg, key, default=None)
    return OmegaConf.to_container(node, resolve=True) if node is not None else {}


def check_unused(cfg: DictConfig) -> None:
    """`layer`, `reference_model` and any `model.*` key mean something only inside a model."""
    stray = next((k for k in _block(cfg, "model") if k not in ("name", "path", "hub")), None)
    if stray is not None and not wants_model(cfg):
        close = difflib.get_close_matches(stray, OWN_KEYS, n=1, cutoff=0.6)
        hint = f"did you mean 'model.{close[0]}'?" if close else "a model key needs a model to run in"
        raise UserError(f"model.{stray}: unknown key without a model (model=hf:TYPE, model.path=DIR, "
                        f"model.hub=REPO_ID or model=NAME); {hint}")
    for key, used in (("layer", cfg.get("layer") is not None), ("reference_model", bool(_block(cfg, "reference_model"))),
                      ("intervene", bool(_block(cfg, "intervene")))):
        if used and not wants_model(cfg):
            raise UserError(f"{key}: only with a model to run in (model=hf:TYPE, model.path=DIR, model.hub=REPO_ID "
                            f"or model=NAME)")


def check_model_request(cfg: DictConfig) -> None:
    """What can be checked without loading anything."""
    spec = model_spec(_block(cfg, "model"))
    if cfg.device not in ("cpu", "auto"):  # auto: the CPU, as every model run
        raise UserError(f"device={cfg.device}: a run inside a model runs on the CPU for now; device=cpu")
    edit = intervention(_block(cfg, "intervene"))
    if edit is not None and is_requested(_block(cfg, "reference_model")):
        raise UserError("intervene: edits one model's layers; the learner's check (reference_model=) compares two")
    if cfg.inputs.get("texts") is not None and is_requested(_block(cfg, "reference_model")):
        raise UserError("inputs.texts: the learner's check (reference_model=) runs on one text: inputs.text=\"...\"")
    if edit is None and not is_requested(_block(cfg, "reference_model")):
        check_variant_fits(cfg.variant.name, spec)
    if is_requested(_block(cfg, "reference_model")):
        model_spec(_block(cfg, "reference_model"), "reference_model")
    declared = declared_config(spec)
    model_type = (declared or {}).get("model_type")  # None: known once built
    check_indices(cfg, declared, edit, seq2seq=_seq2seq(declared))
    check_patch_text(cfg, spec, edit)
    check_batch_lengths(cfg, spec, edit)
    if is_requested(_block(cfg, "reference_model")) or (model_type is not None and family(model_type).task != "image"):
        check_text(cfg)  # a language model's text, before it loads
    if cfg.n_seeds != 1:
        raise UserError(f"n_seeds={cfg.n_seeds}: a model's weights are its own; a run inside a model takes one seed")


def _seq2seq(declared: dict[str, Any] | None) -> bool:
    """An encoder–decoder's config (its layers named by stack in `layer=`)."""
    return bool(declared and declared.get("is_encoder_decoder"))


def check_text(cfg: DictConfig) -> None:
    """A language model runs on text or token ids (a vision transformer on an image drawn from the seed)."""
    if cfg.inputs.get("kind") not in ("text", "ids"):
        raise UserError(f"model: a language model runs on text or token ids: inputs=text inputs.text=\"some words\" "
                        f"or inputs=ids inputs.ids=[464,3290] (got inputs={cfg.inputs.get('kind')})")


def model_inputs(cfg: DictConfig, loaded: LoadedModel, sizes: ModelSizes) -> ModelInputs:
    """What the model is given, by its kind: the text, the text to both stacks, or an image."""
    if loaded.task == "image":
        return image_inputs(loaded.config, cfg.seed)
    check_text(cfg)
    longest = sizes.context or cfg.inputs.max_tokens
    if cfg.inputs.kind == "ids":  # given as they are: no tokenizer runs
        batch = [fitting_ids(read_ids(cfg.inputs.ids), "inputs.ids", "", sizes.vocab, longest)]
    elif cfg.inputs.get("texts") is not None:
        batch = [token_ids(loaded.tokenizer, text, sizes.vocab, longest, "inputs.texts") for text in cfg.inputs.texts]
        if not (loaded.hf and loaded.task == "causal" and cfg.get("intervene")):  # padded: an edit in a Hugging Face causal LM
            same_length(batch, loaded.tokenizer.name)
    else:
        batch = [token_ids(loaded.tokenizer, cfg.inputs.text, sizes.vocab, longest)]
    if loaded.task == "seq2seq":
        return encoder_decoder_inputs(loaded.module, batch, loaded.tokenizer)
    return text_inputs(batch, loaded.tokenizer)


def model_run(cfg: DictConfig, loaded: LoadedModel, attention_path: str | None, layers_key: Any,
              consume: Consume | None = None) -> tuple[ModelRun, list[int], list[Slot], ModelInputs]:
    """The model run once, unmodified, on its inputs, keeping what the chosen layers receive and
    capturing their stages; `consume`: told of each layer's stages as they are captured (made
    from the run's layers, slots and inputs) where nothing runs after, else kept in the run, with
    the blocks' outputs for changed forwards."""
    attention, slots = stacked_attention(loaded.module, attention_path)
    sizes = model_sizes(loaded.config, loaded.label, attention[0][1] if attention else None)
    layers = chosen_slots(layers_key, slots)
    if any(slots[layer].stack == "decoder" for layer in layers):
        _check_decoder_heads(loaded.config, sizes)
    inputs = model_inputs(cfg, loaded, sizes)
    n_tokens = max(len(labels) for labels in inputs.labels.values())
    # (1, T, d) tensors kept: each compared layer's input and its changed final hidden states, and the
    # output of every block before the last compared layer (replayed)
    check_model_fits(loaded.n_parameters, sizes, n_tokens, 2 * len(layers) + max(layers), inputs.scored.shape[0])
    own = OwnCaptures(layers, consume(sizes, attention, layers, slots, inputs) if consume else None)
    run = ModelRun.start(loaded, attention, sizes, inputs, inputs.labels[slots[layers[0]].stack], layers,
                         replay=consume is None, own=own)
    run.names = [slot.name for slot in slots]
    return run, layers, slots, inputs


def _check_decoder_heads(config: Any, sizes: ModelSizes) -> None:
    """A variant is built for the model's one head count (the encoder's, BART's num_attention_heads)."""
    heads = getattr(config, "decoder_attention_heads", sizes.heads)
    if heads != sizes.heads:
        raise UserError(f"model.decoder_attention_heads={heads}: the encoder has {sizes.heads}; attnlab builds a "
                        f"decoder layer's variant for the encoder's count: make them equal")


# made from the run's sizes, attention, layers, slots and inputs before its forward: told of each layer's capture
Consume = Callable[[ModelSizes, list, list[int], list[Slot], ModelInputs], Callable[[int, Any], None]]
# told of each layer's record as it is made, (record, its index, how many): returns the record to keep
Done = Callable[[Record, int, int], Record]


def compute_model_records(cfg: DictConfig, phase: Callable[[str], None] | None = None,
                          done: Done | None = None) -> list[Record]:
    """One record per compared layer (`layer=N`, a list, or `all`); `done(record, index, n)` is called
    with each as soon as it is made (the job writes it and keeps it with most of its stages let go)."""
    say = phase or (lambda _name: None)
    done = done or (lambda record, _index, _n: record)
    check_model_request(cfg)
    if is_requested(_block(cfg, "reference_model")):
        return compute_check_records(cfg, {k: _block(cfg, k) for k in ("model", "reference_model")}, say, done)
    say("model")
    spec = model_spec(_block(cfg, "model"))
    chosen = intervention(_block(cfg, "intervene"))
    loaded = load_model(spec, cfg.seed)
    with evaluating(loaded.module):
        return _records(cfg, loaded, spec.attention_path, chosen, say, done)


def _records(cfg: DictConfig, loaded: LoadedModel, attention_path: str | None, chosen: Intervention | None,
             say: Callable[[str], None], done: Done) -> list[Record]:
    if chosen is not None:
        return intervention_records(cfg, chosen, loaded, lambda consume: model_run(
            cfg, loaded, attention_path, cfg.layer, consume), _tokens(loaded), say, done)
    run, layers, slots, inputs = model_run(cfg, loaded, attention_path, cfg.layer)
    variants = {layer: default_variant(run, layer, cfg.variant.name, cfg.seed) for layer in layers}
    config = resolved(cfg)
    params = OmegaConf.to_container(cfg.variant.params, resolve=True)
    expect = OmegaConf.to_container(cfg.expect, resolve=True)
    changed, effects = [], {}
    for layer in layers:
        say(f"layer {slots[layer].name}: in the model")
        each = changed_layer(run, layer, variants[layer], params, cfg.seed)
        if each.final is not None:  # compared at once: a (1, T, vocab) of logits per layer is not kept
            effects[layer], each.final = run.effects([each.final])[0], None
        changed.append(each)
    records = []
    for each in changed:
        slot = slots[each.layer]
        say(f"layer {slot.name}")
        about = ModelInfo(model=loaded.label, n_layers=sum(s.stack == slot.stack for s in slots),
                          parameters=loaded.n_parameters, tokenizer=_tokens(loaded), heads=run.sizes.heads,
                          kv_heads=run.sizes.kv_heads, layer=slot.index, attention=run.attention[each.layer][0],
                          stack=slot.stack, replaced=slot.replaced,
                          positions=1 if loaded.task == "image" else None)
        setup = Setup(variant=variants[each.layer], seed=cfg.seed, config=copy.deepcopy(config),
                      labels=inputs.labels[slot.stack],
                      n_tokens=run.n_tokens, d_in=run.sizes.width, d_out=run.sizes.width, model=about)
        record = compare_layer(run, each, effects.get(each.layer), setup, variants[each.layer], params, cfg.seed, expect,
                               cfg.reference)
        records.append(done(record, len(records), len(layers)))
    return records


def _tokens(loaded: LoadedModel) -> str:
    """What the model's input is made of, for the record: its tokenizer, or the image."""
    return "patches of a random image drawn from the seed" if loaded.task == "image" else loaded.tokenizer.name
