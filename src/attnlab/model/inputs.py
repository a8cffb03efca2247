"""What a whole model is given, by the kind of model it is, and the ids its output is scored on.

A causal LM is given the text's ids; texts of different lengths (a Hugging Face causal LM's) padded
on the right, with the attention mask a tokenizer's padding gives (1 at a text's tokens, 0 at its
pads): a text's tokens see only its tokens, and its pads are never scored. An encoder–decoder is given the text twice: as the encoder's
input and, shifted right as the model shifts its own labels for training (`prepare_decoder_input_ids_from_labels`:
T5's `_shift_right`, BART's `shift_tokens_right`), as the decoder's; its decoder's logits are compared.
A vision transformer is given a random image drawn from the seed, at its config's size and
channels; its class logits are compared, one position.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, cast

import torch
from torch import Tensor, nn

from attnlab.model.tokens import Tokenizer

START = "<start>"  # the decoder's first position: the model's start token, no token of the text
CLASS = "cls"  # a vision transformer's first token, read by its classifier
PAD = 0  # the id a padded batch's shorter texts are filled with


@dataclass(frozen=True)
class ModelInputs:
    """The forward's keyword arguments and what the effects score."""

    # input_ids= (B, T), decoder_input_ids= (B, T), pixel_values= (1, C, H, W); empty: the text's ids
    # alone, given as attnlab.model.forward gives a causal LM (or a model of your own) them
    given: dict[str, Any]
    scored: Tensor  # (B, P) the ids at the compared logits' positions; their next tokens are the loss's targets
    # per stack (None: the model's one stack), a label per position: the first batch item's tokens
    labels: dict[str | None, list[str]]
    lengths: tuple[int, ...] | None = None  # a padded batch: each text's tokens (its pads after them); None: unpadded


def text_inputs(batch: list[list[int]], tokenizer: Tokenizer) -> ModelInputs:
    """`batch`: one list of ids per batch item, all of one length, or of several padded (a Hugging Face model's)."""
    lengths = [len(ids) for ids in batch]
    if len(set(lengths)) == 1:
        return ModelInputs({}, torch.tensor(batch, dtype=torch.long), {None: tokenizer.labels(batch[0])})  # (B, T)
    longest = max(lengths)
    # the pad id never matters: masked as a key, never scored as a query
    token_ids = torch.tensor([ids + [PAD] * (longest - len(ids)) for ids in batch], dtype=torch.long)  # (B, T)
    attention_mask = real_positions(lengths, longest).long()  # (B, T)
    given = {"input_ids": token_ids, "attention_mask": attention_mask, "use_cache": False}
    return ModelInputs(given, token_ids, {None: tokenizer.labels(batch[0])}, tuple(lengths))


def real_positions(lengths: Sequence[int], n: int) -> Tensor:
    """(B, n) True at each text's own positions, False at its pads."""
    return torch.arange(n) < torch.tensor(list(lengths))[:, None]


def encoder_decoder_inputs(model: nn.Module, batch: list[list[int]], tokenizer: Tokenizer) -> ModelInputs:
    """The text as the encoder's input and, shifted right by the model itself, as the decoder's."""
    token_ids = torch.tensor(batch, dtype=torch.long)  # (B, T)
    # transformers' encoder–decoder method (torch types an attribute of a module as Tensor | Module)
    shift_right = cast("Callable[..., Tensor]", model.prepare_decoder_input_ids_from_labels)
    decoder_ids = shift_right(labels=token_ids)  # (B, T)
    labels = tokenizer.labels(batch[0])
    given = {"input_ids": token_ids, "decoder_input_ids": decoder_ids, "use_cache": False}
    return ModelInputs(given, decoder_ids, {"encoder": labels, "decoder": [START, *labels[:-1]]})


def image_inputs(config: Any, seed: int) -> ModelInputs:
    """A random image drawn from `seed`, its tokens labelled as a ViT's attention sees them: the
    class token, then the patches."""
    generator = torch.Generator().manual_seed(seed)
    size = config.image_size
    pixels = torch.randn(1, config.num_channels, size, size, generator=generator)  # (1, C, H, W)
    labels = [CLASS, *(f"p{i}" for i in range((size // config.patch_size) ** 2))]
    return ModelInputs({"pixel_values": pixels}, torch.zeros(1, 1, dtype=torch.long), {None: labels})
