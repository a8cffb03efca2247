"""What an edit and the chosen layers ask of a model, checked from what its config declares before it
loads (attnlab.model.declared_config): the head and layer indices against the config's head and layer
counts (nothing built), and a patch's text against the run's text and a variant swap's batch of texts
against one length, token for token (the tokenizer alone, not the model)."""

from __future__ import annotations

from typing import Any

from attnlab.errors import UserError
from attnlab.model.declared_config import Declared
from attnlab.model.edits import KINDS
from attnlab.model.interventions import Intervention
from attnlab.model.loading import _transformers
from attnlab.model.locate import chosen_layers
from attnlab.model.request import ModelRequest, ModelTexts
from attnlab.model.tokens import gpt2_tokenizer, hf_tokenizer, same_length


def check_request_inputs(request: ModelRequest, declared: Declared) -> None:
    """The text (a language model's, before it loads), the indices, then what is counted in tokens (a
    patch's text, a variant swap's batch: the tokenizer loaded once for both)."""
    inputs, edit = request.inputs, request.edit
    spec = request.model
    if request.reference_model is not None or declared.reads_text:
        check_text(inputs)
    check_indices(request.layer, declared, edit)
    # a patch replaces position by position: its text has as many tokens as the run's (one text)
    patch = edit is not None and KINDS[edit.kind].other_text and inputs.kind == "text" and inputs.texts is None
    # texts of different lengths run padded under an edit only (in a Hugging Face causal LM, checked once it
    # loads): a variant swap's texts are as many tokens, checked here where the tokenizer is known before it loads
    batch = edit is None and inputs.kind == "text" and inputs.texts is not None and spec.kind in ("hf", "path")
    if not (patch or batch) or spec.kind == "hub":  # a cached hub model's tokenizer: found where it loads
        return
    # the tokenizer the loaded model will have: a saved model's own where it has one, else GPT-2's BPE
    tokenizer = gpt2_tokenizer()
    if spec.kind == "path":
        tokenizer = hf_tokenizer(_transformers(), str(spec.path)) or tokenizer
    if patch:
        assert edit is not None  # a patch is an edit
        given, other = len(tokenizer.encode(str(inputs.text))), len(tokenizer.encode(str(edit.text)))
        if given != other:
            raise UserError(f"intervene.text is {other} tokens ({tokenizer.name}), inputs.text {given}: a patch "
                            f"replaces position by position; give texts of as many tokens")
    if batch:
        same_length([tokenizer.encode(str(text)) for text in inputs.texts or ()], tokenizer.name)


def check_indices(layer: Any, declared: Declared, edit: Intervention | None) -> None:
    """`intervene.head` (each of a list) below the config's head count, `layer=` below its layer count (a model of one
    stack: an encoder–decoder's stacks are named in `layer=` and checked once built)."""
    heads, layers = declared.heads, declared.layers
    if edit is not None and heads is not None:
        edit.heads(int(heads))  # intervene.head=all or a list: each below the count
        if edit.head is not None and edit.head >= heads:
            raise UserError(f"intervene.head={edit.head}: the model has {heads} heads (0 to {heads - 1})")
    if layers is not None and not declared.seq2seq:
        chosen_layers(layer, int(layers))


def check_text(inputs: ModelTexts) -> None:
    """A language model runs on text or token ids (a vision transformer on an image drawn from the seed)."""
    if inputs.kind not in ("text", "ids"):
        raise UserError(f"model: a language model runs on text or token ids: inputs=text inputs.text=\"some words\" "
                        f"or inputs=ids inputs.ids=[464,3290] (got inputs={inputs.kind})")
