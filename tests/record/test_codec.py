"""The codec is derived from the record's dataclasses: every field, at any depth, is written and read
back by its type, and a field added to Record needs one dataclass line and nothing in the codec."""

from __future__ import annotations

import ast
import dataclasses
import json
import types
from pathlib import Path
from typing import Any, Union, get_args, get_origin, get_type_hints

import numpy as np
import pytest

from attnlab.record import Record, RecordError, Side, codec, read_record, write_record

CODEC = Path(codec.__file__)


def made(hint: Any, name: str, building: tuple[type, ...] = ()) -> Any:
    """A value of type `hint` that is no field's default: each field then shows whether it came back.
    `building`: the dataclasses being made around it; a list of one of them inside itself (an effect's
    batch items) is made one level deep."""
    if get_origin(hint) in (Union, types.UnionType):
        return made(next(arg for arg in get_args(hint) if arg is not type(None)), name, building)
    if hint is Side:
        return side(name)
    if dataclasses.is_dataclass(hint):
        kinds = get_type_hints(hint)
        return hint(**{f.name: made(kinds[f.name], f.name, (*building, hint)) for f in dataclasses.fields(hint)
                       if f.init})
    if get_origin(hint) is list:
        element = get_args(hint)[0]
        if element in building and building.count(element) > 1:
            return []
        return [made(element, name, building), made(element, name, building)]
    if get_origin(hint) is dict:
        return {f"{name}_key": made(get_args(hint)[1], name, building)}
    return {str: f"{name} value", int: 7, float: -0.25, bool: True}.get(hint, {"nested": [1, "two"]})


def side(name: str) -> Side:
    """A side whose stages, shapes and canonical shapes agree (a 3-D module's weights), its other
    fields made by type."""
    weights = np.arange(18, dtype=np.float32).reshape(2, 3, 3) / 18  # (batch, query, key)
    kinds = get_type_hints(Side)
    rest = {f.name: made(kinds[f.name], f.name) for f in dataclasses.fields(Side)
            if f.name not in ("name", "stages", "shapes", "canonical_shapes")}
    return Side(name=f"{name} module", stages={"weights": weights}, shapes={"weights": [2, 3, 3]},
                canonical_shapes={"weights": [2, 1, 3, 3]}, **rest)


def a_record_of_every_field(cls: type = Record) -> Any:
    kinds = get_type_hints(cls)
    values = {f.name: made(kinds[f.name], f.name) for f in dataclasses.fields(cls) if f.metadata.get("written", True)}
    return cls(**{**values, "status": "failed"})  # a status a reader allows


def without_stage_values(record: Any) -> Any:
    """The record with its stage arrays set aside, so the rest compares with `==`."""
    return dataclasses.replace(record, path=None, variant=dataclasses.replace(record.variant, stages={}),
                               reference=dataclasses.replace(record.reference, stages={}))


def test_every_field_at_every_depth_comes_back_as_it_was_written(tmp_path: Path) -> None:
    record = a_record_of_every_field()
    assert record.model is not None and record.model.effect is not None and record.findings[0].heads  # all set
    back = read_record(write_record(record, tmp_path))
    assert without_stage_values(back) == without_stage_values(record)
    for name in ("variant", "reference"):
        np.testing.assert_array_equal(getattr(back, name).stages["weights"], getattr(record, name).stages["weights"])
    assert back.reference.canonical("weights").shape == (2, 1, 3, 3)
    again = write_record(back, tmp_path / "again")
    assert again.read_bytes() == (tmp_path / "record.json").read_bytes()


def test_the_codec_names_no_field_of_the_record() -> None:
    """Its keys come from the dataclasses (the file's layout from attnlab.record.layout)."""
    tree = ast.parse(CODEC.read_text())
    words = {node.value for node in ast.walk(tree) if isinstance(node, ast.Constant) and isinstance(node.value, str)}
    words |= {node.attr for node in ast.walk(tree) if isinstance(node, ast.Attribute)}
    assert [f.name for f in dataclasses.fields(Record) if f.name in words] == []


def test_a_field_added_to_the_record_is_written_and_read_with_no_other_change(tmp_path: Path,
                                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """Adding a field is one dataclass line: here a subclass's `notes`, which the codec then writes,
    checks and reads as it does the others; a file written before the field existed loads with its default."""
    extended = dataclasses.make_dataclass("Record", [("notes", dict[str, list[float]], dataclasses.field(
        default_factory=dict))], bases=(Record,), frozen=True, namespace={"__module__": Record.__module__})
    monkeypatch.setattr(codec, "Record", extended)
    record = a_record_of_every_field(extended)
    assert record.notes == {"notes_key": [-0.25, -0.25]}
    path = write_record(record, tmp_path)
    assert json.loads(path.read_text())["notes"] == {"notes_key": [-0.25, -0.25]}
    assert read_record(path).notes == record.notes
    older = json.loads(path.read_text())
    del older["notes"]
    (tmp_path / "older.json").write_text(json.dumps(older))
    assert read_record(tmp_path / "older.json").notes == {}
    (tmp_path / "wrong.json").write_text(json.dumps({**older, "notes": [1]}))  # checked by its type too
    with pytest.raises(RecordError, match="'notes' is list"):
        read_record(tmp_path / "wrong.json")
