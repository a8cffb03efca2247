"""Token embeddings for a run: the source's six tokens, seeded random ones, or a file.

Files are read without pickle: CSV and JSON as text, .npy with allow_pickle=False.
"""

from __future__ import annotations

import csv
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from omegaconf import DictConfig, OmegaConf

from attnlab.errors import UserError


@dataclass(frozen=True)
class Inputs:
    embeddings: torch.Tensor  # (n_tokens, d_in)
    labels: list[str]  # one per token, for display

    @property
    def n_tokens(self) -> int:
        return self.embeddings.shape[0]

    @property
    def d_in(self) -> int:
        return self.embeddings.shape[1]


def make_inputs(cfg: DictConfig, seed: int) -> Inputs:
    if cfg.kind == "random":
        return _random(cfg.n_tokens, cfg.d_in, str(cfg.distribution.value), seed)
    if cfg.kind == "file":
        rows, labels = _read_file(Path(cfg.path))
        return _from_rows(rows, labels, source=f"inputs.path={cfg.path}")
    rows = OmegaConf.to_container(cfg.embeddings) if cfg.embeddings is not None else None
    labels = list(cfg.labels) if cfg.labels is not None else None
    return _from_rows(rows, labels, source="inputs.embeddings")


def _random(n_tokens: int, d_in: int, distribution: str, seed: int) -> Inputs:
    """A generator of its own, so drawing the inputs never moves the global seed the weights use."""
    generator = torch.Generator().manual_seed(seed)
    draw = torch.rand if distribution == "uniform" else torch.randn
    embeddings = draw(n_tokens, d_in, generator=generator)  # (n_tokens, d_in)
    return Inputs(embeddings, [f"t{i}" for i in range(n_tokens)])


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
    return Inputs(embeddings, [str(l) for l in labels] if labels else [f"t{i}" for i in range(len(rows))])


def _read_file(path: Path) -> tuple[list, list[str] | None]:
    if not path.is_file():
        raise UserError(f"inputs.path={path}: no such file")
    suffix = path.suffix.lower()
    try:
        if suffix == ".npy":
            array = np.load(path, allow_pickle=False)
            if array.ndim != 2:
                raise UserError(f"inputs.path={path}: expected a 2-D array (n_tokens, d_in), got shape {array.shape}")
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


def _read_csv(path: Path) -> tuple[list, list[str] | None]:
    """One row per token; a first column that is not a number is the token's label."""
    rows, labels = [], []
    with path.open(newline="", encoding="utf-8") as handle:
        for cells in csv.reader(handle):
            if not cells or all(not c.strip() for c in cells):
                continue
            try:
                float(cells[0])
            except ValueError:
                labels.append(cells[0].strip())
                cells = cells[1:]
            rows.append([float(c) for c in cells])
    return rows, (labels if len(labels) == len(rows) else None)
