"""The input kinds' structured configs: what each kind's config holds, and its checks of its own
values (`__post_init__`, run when Hydra builds it), importable without torch so that a bad value is
refused before torch is imported (attnlab.app.config_checks). The factories they name are in
attnlab.inputs.kinds, attnlab.inputs.text and attnlab.inputs.token_ids."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Any

from attnlab.errors import UserError


class Distribution(Enum):
    uniform = "uniform"
    normal = "normal"


def positive(value: Any, key: str) -> None:
    if value is None or not isinstance(value, int) or isinstance(value, bool) or value <= 0:
        raise UserError(f"{key}={value}: must be a positive integer (1, 2, 3, ...)")


@dataclass
class BookInputsConf:
    """The source's six tokens, or any rows written into the config (conf/inputs/book.yaml)."""

    _target_: str = "attnlab.inputs.kinds.rows_inputs"
    _convert_: str = "all"
    kind: str = "book"
    labels: list[str] | None = None
    embeddings: list[Any] | None = None  # rows are checked by the factory, not by type


@dataclass
class RandomInputsConf:
    """Seeded random token embeddings (conf/inputs/random.yaml)."""

    _target_: str = "attnlab.inputs.kinds.random_inputs"
    _convert_: str = "all"
    kind: str = "random"
    n_tokens: int = 6
    d_in: int = 3
    distribution: Distribution = Distribution.uniform

    def __post_init__(self) -> None:
        positive(self.n_tokens, "inputs.n_tokens")
        positive(self.d_in, "inputs.d_in")


@dataclass
class FileInputsConf:
    """Token embeddings from a file (conf/inputs/file.yaml)."""

    _target_: str = "attnlab.inputs.kinds.file_inputs"
    _convert_: str = "all"
    kind: str = "file"
    path: str | None = None

    def __post_init__(self) -> None:
        if not self.path:
            raise UserError("inputs.path is missing: inputs=file needs inputs.path=FILE (.csv, .json or .npy)")


EMPTY_TEXT = 'inputs.text is empty: inputs=text needs inputs.text="some words"'


@dataclass
class TextInputsConf:
    """Text as GPT-2 BPE tokens embedded by seeded nn.Embedding layers (conf/inputs/text.yaml;
    the factory and the tokenizer's packaging are in attnlab.inputs.text)."""

    _target_: str = "attnlab.inputs.text.text_inputs"
    _convert_: str = "all"
    kind: str = "text"
    text: str | None = None
    texts: list[str] | None = None  # a batch of texts, one per batch item, for a model: in place of `text`
    d_in: int = 3
    positions: bool = False  # add a seeded nn.Embedding(max_tokens, d_in) of positions 0..n-1
    max_tokens: int = 1024  # GPT-2's context length; also the size of the positions' table

    def __post_init__(self) -> None:
        if self.texts is not None and (not self.texts or not all(self.texts)):
            raise UserError(f"inputs.texts={self.texts}: give a list of non-empty texts, one per batch item "
                            f"(inputs.texts='[\"one text\",\"another\"]')")
        if not self.text and self.texts is None:
            raise UserError(EMPTY_TEXT)
        positive(self.d_in, "inputs.d_in")
        positive(self.max_tokens, "inputs.max_tokens")


@dataclass
class IdsInputsConf:
    """Token ids given as they are, a list or a file of them (conf/inputs/ids.yaml; the factory is
    attnlab.inputs.token_ids.ids_inputs): a model takes them as its input ids."""

    _target_: str = "attnlab.inputs.token_ids.ids_inputs"
    _convert_: str = "all"
    kind: str = "ids"
    ids: Any = None  # [464, 3290, ...] or FILE (.json list, or integers separated by spaces, commas or lines)
    d_in: int = 3
    max_tokens: int = 1024

    def __post_init__(self) -> None:
        if self.ids is None or self.ids == []:
            raise UserError("inputs.ids is missing: inputs=ids needs inputs.ids=[464,3290] or inputs.ids=FILE")
        positive(self.d_in, "inputs.d_in")
        positive(self.max_tokens, "inputs.max_tokens")


SCHEMAS = {"book": BookInputsConf, "random": RandomInputsConf, "file": FileInputsConf, "text": TextInputsConf,
           "ids": IdsInputsConf}
