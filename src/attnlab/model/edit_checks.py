"""What an edit and the chosen layers ask of a model, checked from its config before it loads: the
head and layer indices against the config's head and layer counts (nothing built), and a patch's
text against the run's text and a variant swap's batch of texts against one length, token for
token (the tokenizer alone, not the model)."""

from __future__ import annotations

from typing import Any

from attnlab.errors import UserError
from attnlab.model.edits import KINDS
from attnlab.model.interventions import Intervention
from attnlab.model.loading import _transformers
from attnlab.model.locate import chosen_layers
from attnlab.model.model_spec import ModelSpec
from attnlab.model.request import ModelTexts
from attnlab.model.sizes import read_size
from attnlab.model.tokens import Tokenizer, gpt2_tokenizer, hf_tokenizer, same_length


def check_indices(layer: Any, declared: dict[str, Any] | None, edit: Intervention | None,
                  seq2seq: bool) -> None:
    """`intervene.head` (each of a list) below the config's head count, `layer=` below its layer count (a model of one
    stack: an encoder–decoder's stacks are named in `layer=` and checked once built)."""
    if declared is None:
        return
    heads = read_size(declared, "heads")
    if edit is not None and heads is not None:
        edit.heads(int(heads))  # intervene.head=all or a list: each below the count
        if edit.head is not None and edit.head >= heads:
            raise UserError(f"intervene.head={edit.head}: the model has {heads} heads (0 to {heads - 1})")
    layers = read_size(declared, "layers")
    if layers is not None and not seq2seq:
        chosen_layers(layer, int(layers))


def check_patch_text(inputs: ModelTexts, spec: ModelSpec, edit: Intervention | None) -> None:
    """A patch replaces position by position: its text has as many tokens as the run's (one text)."""
    if edit is None or not KINDS[edit.kind].other_text or inputs.kind != "text" or inputs.texts is not None:
        return
    tokenizer = _tokenizer(spec)
    if tokenizer is None:
        return
    given, other = len(tokenizer.encode(str(inputs.text))), len(tokenizer.encode(str(edit.text)))
    if given != other:
        raise UserError(f"intervene.text is {other} tokens ({tokenizer.name}), inputs.text {given}: a patch "
                        f"replaces position by position; give texts of as many tokens")


def check_batch_lengths(inputs: ModelTexts, spec: ModelSpec, edit: Intervention | None) -> None:
    """Texts of different lengths run padded under an edit only (in a Hugging Face causal LM, checked
    once it loads): a variant swap's texts are as many tokens, checked here for a model whose tokenizer
    is known before it loads."""
    texts = inputs.texts
    if edit is not None or texts is None or inputs.kind != "text" or spec.kind not in ("hf", "path"):
        return
    tokenizer = _tokenizer(spec)
    if tokenizer is not None:
        same_length([tokenizer.encode(str(text)) for text in texts], tokenizer.name)


def _tokenizer(spec: ModelSpec) -> Tokenizer | None:
    """The tokenizer the loaded model will have: a saved model's own where it has one, else GPT-2's
    BPE; None for a cached hub model (found where it loads, and checked then)."""
    if spec.kind == "hub":
        return None
    if spec.kind == "path":
        return hf_tokenizer(_transformers(), str(spec.path)) or gpt2_tokenizer()
    return gpt2_tokenizer()


def check_text(inputs: ModelTexts) -> None:
    """A language model runs on text or token ids (a vision transformer on an image drawn from the seed)."""
    if inputs.kind not in ("text", "ids"):
        raise UserError(f"model: a language model runs on text or token ids: inputs=text inputs.text=\"some words\" "
                        f"or inputs=ids inputs.ids=[464,3290] (got inputs={inputs.kind})")
