"""The text as the model's token ids: its own tokenizer where it has one, else the source's GPT-2 BPE."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from attnlab.errors import UserError
from attnlab.file_limits import check_size
from attnlab.inputs.text import ENDOFTEXT, gpt2_encoding, token_label

GPT2_VOCAB = 50257
TOKENIZER_FILES = ("tokenizer.json", "vocab.json", "tokenizer.model", "spiece.model")


@dataclass(frozen=True)
class Tokenizer:
    name: str  # "GPT-2 BPE (tiktoken)" or the Hugging Face tokenizer's class
    encode: Callable[[str], list[int]]
    token_bytes: Callable[[int], bytes]

    def labels(self, ids: list[int]) -> list[str]:
        return [token_label(self.token_bytes(i)) for i in ids]


def gpt2_tokenizer() -> Tokenizer:
    encoding = gpt2_encoding()
    return Tokenizer("GPT-2 BPE (tiktoken)", lambda text: encoding.encode(text, allowed_special={ENDOFTEXT}),
                     encoding.decode_single_token_bytes)


def hf_tokenizer(transformers: Any, source: str) -> Tokenizer | None:
    """The saved model's own tokenizer, from local files only; None when it has none."""
    folder = Path(source)
    if folder.is_dir() and not any((folder / name).is_file() for name in TOKENIZER_FILES):
        return None
    for name in TOKENIZER_FILES:  # a parser that runs out of memory aborts the process: refused before it
        check_size(folder / name, "tokenizer")
    try:
        tokenizer = transformers.AutoTokenizer.from_pretrained(source, local_files_only=True, trust_remote_code=False)
    except (OSError, ValueError):
        return None
    return Tokenizer(type(tokenizer).__name__, lambda text: tokenizer.encode(text, add_special_tokens=False),
                     lambda i: tokenizer.decode([i]).encode("utf-8"))


def token_ids(tokenizer: Tokenizer, text: str | None, vocab_size: int | None, max_tokens: int,
              key: str = "inputs.text") -> list[int]:
    if not text:
        raise UserError(f'{key} is empty: model= runs on inputs=text inputs.text="some words"')
    ids = tokenizer.encode(text)
    if not ids:
        raise UserError(f"{key}: the model's tokenizer ({tokenizer.name}) gives no tokens for {text!r}")
    return fitting_ids(ids, key, f" ({tokenizer.name})", vocab_size, max_tokens)


def same_length(batch: list[list[int]], tokenizer: str) -> None:
    """A batch of texts runs padded under an edit in a Hugging Face causal LM (attnlab.model.inputs),
    else as one (B, T) forward of texts of one length: a variant in the layer's place is given the
    hidden states alone, so a pad would be a token it sees."""
    lengths = [len(ids) for ids in batch]
    if len(set(lengths)) > 1:
        raise UserError(f"inputs.texts are {', '.join(map(str, lengths))} tokens ({tokenizer}): texts of different "
                        f"lengths run padded under intervene= in a Hugging Face causal LM; here a batch runs texts "
                        f"of as many tokens: shorten or lengthen them, or run each text alone")


def fitting_ids(ids: list[int], key: str, source: str, vocab_size: int | None, max_tokens: int) -> list[int]:
    """`ids` checked against the model's context and vocabulary; `source`: where they came from, for the message."""
    if len(ids) > max_tokens:
        raise UserError(f"{key} is {len(ids)} tokens, more than the model's context of {max_tokens}; shorten it")
    if vocab_size is not None and max(ids) >= vocab_size:
        raise UserError(f"{key} has token id {max(ids)}{source}; the model's vocabulary has "
                        f"{vocab_size} rows (model.vocab_size={GPT2_VOCAB} fits GPT-2 BPE)")
    return ids
