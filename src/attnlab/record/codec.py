"""A record as a JSON object and back, derived from its dataclasses: each field is written under its
name and read back by its type, so a field added to Record (or to a Finding, a Prediction, a
ModelInfo, a Side) needs nothing here. How that nests into record.json's flat keys, and how older
formats read as today's, is attnlab.record.layout's.

JSON has no NaN or infinity: they are spelled as strings, so the file stays standard JSON.
"""

from __future__ import annotations

import dataclasses
import types
from functools import cache
from pathlib import Path
from typing import Any, Union, get_args, get_origin, get_type_hints

from attnlab.record import layout
from attnlab.record.layout import FORMAT_VERSION, INLINE_LIMIT
from attnlab.record.model import Record, Side

__all__ = ["FORMAT_VERSION", "INLINE_LIMIT", "from_json_dict", "json_types", "to_json_dict", "unread_keys"]


def to_json_dict(record: Record) -> dict[str, Any]:
    sides = {f.name: layout.side_to_json(f.name, getattr(record, f.name), encode) for f in _sides()}
    written = {f.name: encode(getattr(record, f.name), hints(Record)[f.name]) for f in _plain()}
    return layout.flat(sides, written, [f.name for f in written_fields(Record)])


def from_json_dict(data: dict[str, Any], path: Path | None = None) -> Record:
    data = layout.as_current(data)
    sides: dict[str, Any] = {f.name: layout.side_from_json(f.name, data, decode) for f in _sides()}
    values: dict[str, Any] = {f.name: decode(data[f.name], hints(Record)[f.name]) for f in _plain()
                              if data.get(f.name) is not None}  # missing or null: the field's default
    return Record(**sides, **values, path=path)


def unread_keys(data: dict[str, Any]) -> list[str]:
    """The keys of a record's JSON this version does not read (written by a newer attnlab), as
    `key`, `findings[].key`, `predictions[].key`, `model.key`."""
    known = json_types()
    unread = [key for key in data if key not in known]
    for f in _plain():
        cls, many = _dataclass_in(hints(Record)[f.name])
        if cls is None:
            continue
        names = {each.name for each in written_fields(cls)}
        value = data.get(f.name)
        items: list[Any] = (value if isinstance(value, list) else []) if many else [value]
        found = {k for item in items if isinstance(item, dict) for k in item if k not in names}
        keys = sorted(found) if many else _in_order(items, found)
        unread += [f"{f.name}{'[]' if many else ''}.{key}" for key in keys]
    return unread


def json_types() -> dict[str, type]:
    """Each top-level key a record file holds, with the JSON type its field is written as (`object`
    for a float or an `Any`: no one type): what a reader checks before it decodes (attnlab.record.validate)."""
    hinted = {key: hint for f in _sides() for key, hint in layout.side_types(f.name).items()}
    hinted |= {f.name: hints(Record)[f.name] for f in _plain()}
    return {"format_version": int} | {key: _json_type(hint) for key, hint in hinted.items()}


def encode(value: Any, hint: Any) -> Any:
    """`value`, of type `hint`, as JSON: dataclasses as objects of their written fields, floats as
    numbers or "nan"/"inf"/"-inf"."""
    if value is None:
        return {} if _optional(hint) in layout.SPARSE else None
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        kinds = hints(type(value))
        out = {f.name: encode(getattr(value, f.name), kinds[f.name]) for f in written_fields(type(value))}
        return {k: v for k, v in out.items() if v is not None} if type(value) in layout.UNSET_LEFT_OUT else out
    hint = _optional(hint)
    if hint is float:
        return layout.json_number(value)
    if get_origin(hint) is dict:
        return {k: encode(v, get_args(hint)[1]) for k, v in value.items()}
    if get_origin(hint) is list:
        return [encode(v, get_args(hint)[0]) for v in value]
    return value


def decode(value: Any, hint: Any) -> Any:
    """JSON `value` as type `hint`: the inverse of `encode`; a dataclass's unknown keys left out
    (`unread_keys` names them), its missing ones its defaults."""
    hint = _optional(hint)
    if value is None:
        return None
    if dataclasses.is_dataclass(hint) and isinstance(hint, type):
        if hint in layout.SPARSE and not value:
            return None
        kinds = hints(hint)
        return hint(**{f.name: decode(value[f.name], kinds[f.name]) for f in written_fields(hint) if f.name in value})
    if hint in (float, int, str, bool):
        return hint(value)
    if get_origin(hint) is dict:
        return {k: decode(v, get_args(hint)[1]) for k, v in value.items()}
    if get_origin(hint) is list:
        return [decode(v, get_args(hint)[0]) for v in value]
    return value


@cache
def hints(cls: type) -> dict[str, Any]:
    return get_type_hints(cls)


def written_fields(cls: type) -> list[dataclasses.Field[Any]]:
    """The fields a record file holds: all but those marked `metadata={"written": False}`."""
    return [f for f in dataclasses.fields(cls) if f.metadata.get("written", True)]


def _sides() -> list[dataclasses.Field[Any]]:
    return [f for f in written_fields(Record) if hints(Record)[f.name] is Side]


def _plain() -> list[dataclasses.Field[Any]]:
    return [f for f in written_fields(Record) if hints(Record)[f.name] is not Side]


def _optional(hint: Any) -> Any:
    """`X` for `X | None`; any other type as it is."""
    if get_origin(hint) in (Union, types.UnionType):
        rest = [arg for arg in get_args(hint) if arg is not type(None)]
        return rest[0] if len(rest) == 1 else hint
    return hint


def _json_type(hint: Any) -> type:
    hint = _optional(hint)
    if dataclasses.is_dataclass(hint) or get_origin(hint) is dict:
        return dict
    if get_origin(hint) is list:
        return list
    return hint if hint in (str, int, bool) else object


def _dataclass_in(hint: Any) -> tuple[type | None, bool]:
    """The dataclass a field holds, and whether as a list of them (findings) or one (model)."""
    hint = _optional(hint)
    many = get_origin(hint) is list
    inner = _optional(get_args(hint)[0]) if many else hint
    return (inner if dataclasses.is_dataclass(inner) and isinstance(inner, type) else None), many


def _in_order(items: list[Any], found: set[str]) -> list[str]:
    return [k for item in items if isinstance(item, dict) for k in item if k in found]
