"""Token embeddings for a run: the source's six tokens, seeded random ones, or a file.

Each input kind is a factory and a config: `conf/inputs/NAME.yaml` names its structured config
(a dataclass of attnlab.inputs.input_configs, registered by attnlab.app.config_store as `attnlab/inputs/NAME`) and a `_target_`
factory, which `make_inputs` calls with the seed and the config's fields (`kind` included) and
which returns `Inputs`. A config checks its own values when it is built (`__post_init__`), so a
bad value fails in one line before any work, in a single run and for every value of a sweep.
A new kind is one factory and one YAML file (a dataclass of its own is optional: without one,
the factory's signature is the schema). Files are read without pickle: CSV and JSON as text,
.npy with allow_pickle=False.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from attnlab.errors import UserError
from attnlab.file_limits import check_size
from attnlab.inputs.input_configs import Distribution


@dataclass(frozen=True)
class Inputs:
    embeddings: torch.Tensor  # (n_tokens, d_in): what a 2-D module gets, and the first batch item
    labels: list[str]  # one per token, for display
    items: torch.Tensor | None = None  # (batch, n_tokens, d_in) distinct batch items, where the kind has them

    def batched(self, batch: int) -> torch.Tensor:
        """(batch, n_tokens, d_in): the distinct items where there are, else the inputs stacked as
        the source's torch.stack((inputs, inputs))."""
        if self.items is not None:
            return self.items[:batch] if self.items.shape[0] >= batch else self.items
        return torch.stack([self.embeddings] * batch)

    @property
    def n_tokens(self) -> int:
        return self.embeddings.shape[0]

    @property
    def d_in(self) -> int:
        return self.embeddings.shape[1]


def make_inputs(values: Mapping[str, Any], seed: int, batch: int = 1) -> Inputs:
    """The inputs of one seed: the factory of the `inputs` values called with the seed (and the batch
    size, where the factory takes one: random inputs draw distinct items); the values are plain data,
    resolved once by the app (a text is data: a `${...}` in it stays as written)."""
    from attnlab.configured import build, factory

    target = values.get("_target_")
    try:
        takes_batch = _takes_batch(factory(values))
        inputs = build(values, seed=seed, **({"batch": batch} if takes_batch else {}))
    except UserError:
        raise
    except Exception as exc:  # noqa: BLE001 - a plugin's factory: its error is the run's one line
        raise inputs_error(target, exc) from None
    if not isinstance(inputs, Inputs):
        raise UserError(f"inputs: {target} returned {type(inputs).__name__}, not attnlab.inputs.kinds.Inputs")
    return inputs


def inputs_error(target: Any, exc: Exception) -> UserError:
    """The one line for inputs whose factory (or whose values) failed."""
    return UserError(f"inputs: {target}: {(str(exc) or type(exc).__name__).splitlines()[0]}")


def _takes_batch(function: Any) -> bool:
    import inspect

    try:
        return "batch" in inspect.signature(function).parameters
    except (ValueError, TypeError):
        return False


def rows_inputs(seed: int, kind: str, embeddings: list[Any] | None, labels: list[str] | None = None) -> Inputs:
    """Rows written into the config (the book's six tokens); the seed is not used."""
    return _from_rows(embeddings, labels, source="inputs.embeddings")


def random_inputs(seed: int, kind: str, n_tokens: int, d_in: int, distribution: Distribution | str,
                  batch: int = 1) -> Inputs:
    return _random(n_tokens, d_in, Distribution(distribution).value, seed, batch)


def file_inputs(seed: int, kind: str, path: str) -> Inputs:
    """A file of (n_tokens, d_in) rows, or (batch, n_tokens, d_in) items (.npy, .json)."""
    rows, labels = _read_file(Path(path))
    if isinstance(rows, list) and rows and all(isinstance(r, list) and r and isinstance(r[0], list) for r in rows):
        first = _from_rows(rows[0], labels, source=f"inputs.path={path}")
        items = [_from_rows(item, labels, source=f"inputs.path={path}").embeddings for item in rows]
        if len({tuple(item.shape) for item in items}) != 1:
            raise UserError(f"inputs.path={path}: batch items differ in shape; every item needs (n_tokens, d_in)")
        return Inputs(first.embeddings, first.labels, torch.stack(items))
    return _from_rows(rows, labels, source=f"inputs.path={path}")


def _random(n_tokens: int, d_in: int, distribution: str, seed: int, batch: int = 1) -> Inputs:
    """A generator of its own, so drawing the inputs never moves the global seed the weights use.
    The first item is drawn alone, as a 2-D run draws it; the other batch items follow it."""
    generator = torch.Generator().manual_seed(seed)
    draw = torch.rand if distribution == "uniform" else torch.randn
    embeddings = draw(n_tokens, d_in, generator=generator)  # (n_tokens, d_in)
    items = None
    if batch > 1:
        rest = draw(batch - 1, n_tokens, d_in, generator=generator)  # (batch - 1, n_tokens, d_in)
        items = torch.cat([embeddings[None], rest])  # (batch, n_tokens, d_in)
    return Inputs(embeddings, [f"t{i}" for i in range(n_tokens)], items)


def _from_rows(rows: Any, labels: list[str] | None, source: str) -> Inputs:
    if not isinstance(rows, list) or not rows:
        raise UserError(f"{source}: no token rows; expected a list of equal-length rows of numbers")
    lengths = sorted({len(row) if isinstance(row, list) else -1 for row in rows})
    if len(lengths) != 1 or lengths[0] <= 0:
        shown = ", ".join("not a row" if n < 0 else str(n) for n in lengths)
        raise UserError(f"{source}: rows differ in length ({shown}); every token row needs the same d_in")
    try:
        embeddings = torch.tensor(rows, dtype=torch.float32)  # (n_tokens, d_in)
    except (TypeError, ValueError) as exc:
        raise UserError(f"{source}: rows must hold numbers only ({exc})") from None
    if labels is not None and len(labels) != len(rows):
        raise UserError(f"{source}: {len(labels)} labels for {len(rows)} token rows; give one label per row")
    return Inputs(embeddings, [str(label) for label in labels] if labels else [f"t{i}" for i in range(len(rows))])


def _read_file(path: Path) -> tuple[Any, Any]:  # the file's rows and labels, unchecked: _from_rows checks them
    if not path.is_file():
        raise UserError(f"inputs.path={path}: no such file")
    check_size(path, "inputs")
    suffix = path.suffix.lower()
    try:
        if suffix == ".npy":
            array = np.load(path, allow_pickle=False)
            if array.ndim not in (2, 3):
                raise UserError(f"inputs.path={path}: expected (n_tokens, d_in) or (batch, n_tokens, d_in), "
                                f"got shape {array.shape}")
            return array.tolist(), None
        if suffix == ".json":
            data = json.loads(path.read_text(encoding="utf-8"))
            if isinstance(data, dict):
                return data.get("embeddings"), data.get("labels")
            return data, None
        if suffix == ".csv":
            return _read_csv(path)
    except (OSError, ValueError) as exc:
        raise UserError(f"inputs.path={path}: cannot read ({exc})") from None
    raise UserError(f"inputs.path={path}: unsupported file type '{suffix}'; allowed: .csv, .json, .npy")


def _read_csv(path: Path) -> tuple[list[Any], list[str] | None]:
    """One row per token, numbers; an optional header row (a first row without a number) and an
    optional label column, first or last (a column that is not all numbers)."""
    with path.open(newline="", encoding="utf-8") as handle:
        rows = [[c.strip() for c in cells] for cells in csv.reader(handle) if any(c.strip() for c in cells)]
    if len(rows) > 1 and not any(_is_number(c) for c in rows[0]):
        rows = rows[1:]  # the header
    label_at = next((at for at in (0, -1) if rows and not all(_is_number(r[at]) for r in rows if r)), None)
    labels = [r[label_at] for r in rows] if label_at is not None else None
    numbers = []
    for i, cells in enumerate(rows, start=1):
        cells = cells[1:] if label_at == 0 else cells[:-1] if label_at == -1 else cells
        bad = next((c for c in cells if not _is_number(c)), None)
        if bad is not None:
            raise UserError(f"inputs.path={path}: token row {i} holds {bad!r} where a number belongs; a .csv is "
                            f"one row of numbers per token, with an optional header row and an optional label "
                            f"column (first or last)")
        numbers.append([float(c) for c in cells])
    return numbers, labels


def _is_number(cell: str) -> bool:
    try:
        float(cell)
    except ValueError:
        return False
    return True
