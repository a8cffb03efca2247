"""Whether a JSON object is a record a reader can rely on, before it is decoded."""

from __future__ import annotations

from typing import Any

from attnlab.record.codec import json_types


class RecordError(ValueError):
    """A record file that cannot be read: reported by path and skipped by readers."""


STATUSES = ("ok", "failed")
# The type of every field a reader relies on (the others' from the record's dataclasses, by the
# codec): a record is any JSON, and a reader is never a traceback.
REQUIRED_TYPES: dict[str, type | tuple[type, ...]] = {"variant": str, "seed": int, "status": str}


def check_record_data(data: Any) -> None:
    """Raise RecordError naming the first field of the wrong type (None is allowed where optional)."""
    if not isinstance(data, dict):
        raise RecordError(f"not a record: a JSON {type(data).__name__}, expected an object")
    for name, types in {**REQUIRED_TYPES, **json_types()}.items():
        value = data.get(name)
        if (value is None and name not in REQUIRED_TYPES) or types is object:  # object: a float's or an Any's
            continue
        if value is None:
            raise RecordError(f"no '{name}' field")
        if not isinstance(value, types) or (isinstance(value, bool) and types is not bool):
            raise RecordError(f"'{name}' is {type(value).__name__} {str(value)[:40]!r}, expected {_type_names(types)}")
    if data["status"] not in STATUSES:
        raise RecordError(f"'status' is {data['status'][:40]!r}, expected one of {', '.join(STATUSES)}")


def _type_names(types: type | tuple[type, ...]) -> str:
    return " or ".join(t.__name__ for t in (types if isinstance(types, tuple) else (types,)))
