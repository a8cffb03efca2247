"""What a whole model is given, by the kind of model it is, and the ids its output is scored on.

A causal LM is given the text's ids. An encoder–decoder is given the text twice: as the encoder's
input and, shifted right as the model shifts its own labels for training (`prepare_decoder_input_ids_from_labels`:
T5's `_shift_right`, BART's `shift_tokens_right`), as the decoder's; its decoder's logits are compared.
A vision transformer is given a random image drawn from the seed, at its config's size and
channels; its class logits are compared, one position.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn

from attnlab.model.tokens import Tokenizer

START = "<start>"  # the decoder's first position: the model's start token, no token of the text
CLASS = "cls"  # a vision transformer's first token, read by its classifier


@dataclass(frozen=True)
class ModelInputs:
    """The forward's keyword arguments and what the effects score."""

    # input_ids= (B, T), decoder_input_ids= (B, T), pixel_values= (1, C, H, W); empty: the text's ids
    # alone, given as attnlab.model.forward gives a causal LM (or a model of your own) them
    given: dict[str, Any]
    scored: Tensor  # (B, P) the ids at the compared logits' positions; their next tokens are the loss's targets
    # per stack (None: the model's one stack), a label per position: the first batch item's tokens
    labels: dict[str | None, list[str]]


def text_inputs(batch: list[list[int]], tokenizer: Tokenizer) -> ModelInputs:
    """`batch`: one list of ids per batch item, all of one length."""
    token_ids = torch.tensor(batch, dtype=torch.long)  # (B, T)
    return ModelInputs({}, token_ids, {None: tokenizer.labels(batch[0])})


def encoder_decoder_inputs(model: nn.Module, batch: list[list[int]], tokenizer: Tokenizer) -> ModelInputs:
    """The text as the encoder's input and, shifted right by the model itself, as the decoder's."""
    token_ids = torch.tensor(batch, dtype=torch.long)  # (B, T)
    decoder_ids = model.prepare_decoder_input_ids_from_labels(labels=token_ids)  # (B, T)
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
