"""A model run once, unmodified, on its inputs, and the records of its chosen layers with the
variant in each one's place (attnlab.model.layer): what a job inside a model does once the model
is loaded (attnlab.model.model_job)."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

from attnlab.errors import UserError
from attnlab.inputs.token_ids import read_ids
from attnlab.model.default_variant import default_variant
from attnlab.model.edit_checks import check_text
from attnlab.model.inputs import ModelInputs, encoder_decoder_inputs, image_inputs, text_inputs
from attnlab.model.layer import ModelRun, OwnCaptures, changed_layer, compare_layer
from attnlab.model.loading import LoadedModel
from attnlab.model.model_memory import check_model_fits
from attnlab.model.request import ModelRequest
from attnlab.model.sizes import ModelSizes, model_sizes
from attnlab.model.stacks import Slot, chosen_slots, stacked_attention
from attnlab.model.tokens import fitting_ids, same_length, token_ids
from attnlab.record import ModelInfo, Record, Setup


def model_inputs(request: ModelRequest, loaded: LoadedModel, sizes: ModelSizes) -> ModelInputs:
    """What the model is given, by its kind: the text, the text to both stacks, or an image."""
    if loaded.task == "image":
        return image_inputs(loaded.config, request.seed)
    given = request.inputs
    check_text(given)
    longest = sizes.context or given.max_tokens
    assert longest is not None  # inputs=text and inputs=ids declare max_tokens (check_text)
    if given.kind == "ids":  # given as they are: no tokenizer runs
        batch = [fitting_ids(read_ids(given.ids), "inputs.ids", "", sizes.vocab, longest)]
    elif given.texts is not None:
        batch = [token_ids(loaded.tokenizer, text, sizes.vocab, longest, "inputs.texts") for text in given.texts]
        if not (loaded.hf and loaded.task == "causal" and request.edit):  # padded: an edit in a Hugging Face causal LM
            same_length(batch, loaded.tokenizer.name)
    else:
        batch = [token_ids(loaded.tokenizer, given.text, sizes.vocab, longest)]
    if loaded.task == "seq2seq":
        return encoder_decoder_inputs(loaded.module, batch, loaded.tokenizer)
    return text_inputs(batch, loaded.tokenizer)


def model_run(request: ModelRequest, loaded: LoadedModel, consume: Consume | None = None, rebuilt: bool = False
              ) -> tuple[ModelRun, list[int], list[Slot], ModelInputs]:
    """The model run once, unmodified, on its inputs, keeping what the chosen layers receive and
    capturing their stages; `consume`: told of each layer's stages as they are captured (made
    from the run's layers, slots and inputs) where nothing runs after, else kept in the run, with
    the blocks' outputs for changed forwards. A model whose forward replaces its attention modules
    (BigBird's block-sparse attention becomes full attention on a short text) is run again with the
    modules it made (`rebuilt`)."""
    attention, slots = stacked_attention(loaded.module, request.model.attention_path)
    sizes = model_sizes(loaded.config, loaded.label, attention[0][1] if attention else None)
    layers = chosen_slots(request.layer, slots)
    if any(slots[layer].stack == "decoder" for layer in layers):
        _check_decoder_heads(loaded.config, sizes)
    inputs = model_inputs(request, loaded, sizes)
    n_tokens = max(len(labels) for labels in inputs.labels.values())
    # (1, T, d) tensors kept: each compared layer's input and its changed final hidden states, and the
    # output of every block before the last compared layer (replayed)
    check_model_fits(loaded.n_parameters, sizes, n_tokens, 2 * len(layers) + max(layers), inputs.scored.shape[0])
    own = OwnCaptures(layers, consume(sizes, attention, layers, slots, inputs) if consume else None)
    run = ModelRun.start(loaded, attention, sizes, inputs, inputs.labels[slots[layers[0]].stack], layers,
                         replay=consume is None, own=own)
    if not set(layers) <= set(run.calls):  # its forward built its attention anew: found again, run again once
        if not rebuilt:
            return model_run(request, loaded, consume, rebuilt=True)
        missing = next(layer for layer in layers if layer not in run.calls)
        raise UserError(f"{attention[missing][0]}: the model's forward never called it; point at the attention it "
                        f"calls with model.attention_path=BLOCKS.*.NAME")
    run.names = [slot.name for slot in slots]
    return run, layers, slots, inputs


def _check_decoder_heads(config: Any, sizes: ModelSizes) -> None:
    """A variant is built for the model's one head count (the encoder's, BART's num_attention_heads)."""
    heads = getattr(config, "decoder_attention_heads", sizes.heads)
    if heads != sizes.heads:
        raise UserError(f"model.decoder_attention_heads={heads}: the encoder has {sizes.heads}; attnlab builds a "
                        f"decoder layer's variant for the encoder's count: make them equal")


# made from the run's sizes, attention, layers, slots and inputs before its forward: told of each layer's capture
Consume = Callable[[ModelSizes, list[Any], list[int], list[Slot], ModelInputs], Callable[[int, Any], None]]
# told of each layer's record as it is made, (record, its index, how many): returns the record to keep
Done = Callable[[Record, int, int], Record]


def layer_records(request: ModelRequest, loaded: LoadedModel, say: Callable[[str], None], done: Done) -> list[Record]:
    """The run once, then each chosen layer with the variant in its place: one record per layer."""
    run, layers, slots, inputs = model_run(request, loaded)
    variants = {layer: default_variant(run, layer, request.variant, request.seed) for layer in layers}
    params, seed = request.params, request.seed
    changed, effects = [], {}
    for layer in layers:
        say(f"layer {slots[layer].name}: in the model")
        each = changed_layer(run, layer, variants[layer], params, seed)
        if each.final is not None:  # compared at once: a (1, T, vocab) of logits per layer is not kept
            effects[layer], each.final = run.effects([each.final])[0], None
        changed.append(each)
    records: list[Record] = []
    for each in changed:
        slot = slots[each.layer]
        say(f"layer {slot.name}")
        about = ModelInfo(model=loaded.label, n_layers=sum(s.stack == slot.stack for s in slots),
                          parameters=loaded.n_parameters, tokenizer=tokens_label(loaded), heads=run.sizes.heads,
                          kv_heads=run.sizes.kv_heads, layer=slot.index, attention=run.attention[each.layer][0],
                          stack=slot.stack, replaced=slot.replaced,
                          positions=1 if loaded.task == "image" else None)
        setup = Setup(variant=variants[each.layer], seed=seed, config=copy.deepcopy(request.config),
                      labels=inputs.labels[slot.stack],
                      n_tokens=run.n_tokens, d_in=run.sizes.width, d_out=run.sizes.width, model=about)
        record = compare_layer(run, each, effects.get(each.layer), setup, variants[each.layer], params, seed, request.expect,
                               request.reference)
        records.append(done(record, len(records), len(layers)))
    return records


def tokens_label(loaded: LoadedModel) -> str:
    """What the model's input is made of, for the record: its tokenizer, or the image."""
    return "patches of a random image drawn from the seed" if loaded.task == "image" else loaded.tokenizer.name
