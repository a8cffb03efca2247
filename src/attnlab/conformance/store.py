"""The survey's folder: one JSON file per surveyed type (written atomically, so a killed run leaves
whole rows or none), an attempt marker per started type, and the table rebuilt from them."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path
from typing import Any, TypeVar, overload

from attnlab.conformance.survey import Row
from attnlab.record.files import write_atomic

_Kind = TypeVar("_Kind")  # a survey's row class

COLUMNS = ("type", "class", "outcome", "defines_attention", "declared", "errors", "seconds", "message", "transformers")


def row_path(folder: Path, model_type: str) -> Path:
    return folder / "rows" / f"{model_type}.json"


def write_row(folder: Path, row: Row) -> None:
    write_atomic(row_path(folder, row.type), json.dumps(row.as_dict()))


def done(folder: Path) -> set[str]:
    return {p.stem for p in (folder / "rows").glob("*.json")}


def attempts(folder: Path, model_type: str) -> int:
    """How many times a worker has started this type (a worker killed on it leaves the count)."""
    path = folder / "rows" / f"{model_type}.started"
    return int(path.read_text() or 0) if path.exists() else 0


def mark_started(folder: Path, model_type: str) -> None:
    (folder / "rows").mkdir(parents=True, exist_ok=True)
    write_atomic(folder / "rows" / f"{model_type}.started", str(attempts(folder, model_type) + 1))


@overload
def rows(folder: Path) -> list[Row]: ...
@overload
def rows(folder: Path, kind: type[_Kind]) -> list[_Kind]: ...
def rows(folder: Path, kind: type[Any] = Row) -> list[Any]:
    """Every surveyed type's row, by type (`kind`: the survey's row class)."""
    return [kind(**json.loads(p.read_text())) for p in sorted((folder / "rows").glob("*.json"))]


def to_csv(found: list[Row], version: str) -> str:
    """The conformance table, one line per type, with the transformers release it surveyed."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(COLUMNS)
    for r in sorted(found, key=lambda r: r.type):
        writer.writerow([r.type, r.cls, r.outcome, int(r.defines_attention), " ".join(r.info), " ".join(r.errors),
                         f"{r.seconds:.2f}", r.message, version])
    return out.getvalue()


def from_csv(text: str) -> tuple[list[Row], str]:
    """The rows of a conformance table and the transformers release it surveyed."""
    table = list(csv.DictReader(io.StringIO(text)))
    return [Row(type=d["type"], cls=d["class"], outcome=d["outcome"], defines_attention=d["defines_attention"] == "1",
                info=d["declared"].split(), errors=d["errors"].split(), seconds=float(d["seconds"]),
                message=d["message"]) for d in table], table[0]["transformers"] if table else ""
