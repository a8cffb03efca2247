"""Inputs that are token ids already: a list in the config, or a file of them.

A model takes them as its input ids, unchanged (no tokenizer runs); alone, without a model, they are
GPT-2 ids embedded as `inputs=text` embeds its tokens.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from attnlab.errors import UserError
from attnlab.inputs.kinds import Inputs
from attnlab.inputs.text import embed, gpt2_encoding, token_label


def read_ids(ids: Any) -> list[int]:
    """`inputs.ids` as a list of non-negative integers: the list itself, or read from its file."""
    if isinstance(ids, str):
        path = Path(ids).expanduser()
        if not path.is_file():
            raise UserError(f"inputs.ids={ids}: no such file; give a list (inputs.ids=[464,3290]) or a file of ids")
        text = path.read_text()
        try:
            ids = json.loads(text) if path.suffix == ".json" else [int(word) for word in re.split(r"[\s,]+", text.strip())]
        except ValueError:
            raise UserError(f"inputs.ids={ids}: the file holds something other than integers (a .json list, or "
                            f"integers separated by spaces, commas or lines)") from None
    ids = list(ids) if isinstance(ids, Sequence) and not isinstance(ids, str) else ids  # a config's list too
    if not isinstance(ids, list) or not ids or not all(isinstance(i, int) and not isinstance(i, bool) and i >= 0
                                                      for i in ids):
        raise UserError(f"inputs.ids={ids}: must be a non-empty list of token ids (integers from 0)")
    return ids


def ids_inputs(seed: int, kind: str, ids: Any, d_in: int, max_tokens: int) -> Inputs:
    """The ids as GPT-2 tokens, each row the token's seeded embedding, labelled with the token's text."""
    ids = read_ids(ids)
    encoding = gpt2_encoding()
    if len(ids) > max_tokens or max(ids) >= encoding.n_vocab:
        raise UserError(f"inputs.ids: {len(ids)} ids, the largest {max(ids)}; without a model they are GPT-2's "
                        f"(below {encoding.n_vocab}), at most inputs.max_tokens={max_tokens}")
    labels = [token_label(encoding.decode_single_token_bytes(i)) for i in ids]
    return Inputs(embed(ids, encoding.n_vocab, d_in, seed), labels)
