"""A record on disk: written as JSON (never pickle), atomically, before any sink runs, so that a
sweep table can always be rebuilt from the records on disk."""

from __future__ import annotations

import json
import os
import sys
import tempfile
from dataclasses import replace
from pathlib import Path
from typing import Any

from attnlab.errors import UserError
from attnlab.file_limits import check_size
from attnlab.process_state import current_umask
from attnlab.record.codec import FORMAT_VERSION, from_json_dict, to_json_dict, unread_keys
from attnlab.record.model import Record
from attnlab.record.validate import RecordError, check_record_data

RECORD_FILE = "record.json"


class WriteError(OSError):
    """A file attnlab could not write: the folder and the cause first, in one line."""

    def __str__(self) -> str:
        return str(self.strerror)


def write_atomic(path: Path, content: str | bytes, *, durable: bool = False) -> None:
    """Write via a temp file and rename, so a reader (or a Ctrl-C, or a kill) never sees half a
    file; the file gets the mode a plain open() would (0666 less the umask). `durable`: its bytes
    reach the disk before the rename (a record, which says the job is done). A write that fails
    raises WriteError naming the folder and the cause (not the temp file's name)."""
    tmp = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
        with os.fdopen(fd, "wb") as handle:
            handle.write(content.encode("utf-8") if isinstance(content, str) else content)
            handle.flush()
            if durable:
                os.fsync(handle.fileno())
        os.chmod(tmp, 0o666 & ~current_umask())  # mkstemp makes 0600 whatever the umask
        os.replace(tmp, path)
    except OSError as exc:
        _remove(tmp)
        raise WriteError(exc.errno, f"{path.parent}: cannot write {path.name}: {exc.strerror or exc}") from None
    except BaseException:
        _remove(tmp)
        raise


def _remove(tmp: str | None) -> None:
    if tmp is not None:
        try:
            Path(tmp).unlink(missing_ok=True)
        except OSError:  # the folder went read-only: the temp file's dot-name keeps it out of every reader
            pass


def write_record(record: Record, job_dir: Path) -> Path:
    path = job_dir / RECORD_FILE
    write_atomic(path, json.dumps(to_json_dict(record), allow_nan=False), durable=True)  # no indent: json uses its C encoder only then
    return path


def written(record: Record, job_dir: Path) -> Record:
    """The record written to `job_dir`, knowing its path."""
    return replace(record, path=write_record(record, job_dir))


def read_record(path: Path) -> Record:
    """The record at `path`; any file that is not a record (not JSON, the wrong shape, a field of
    the wrong type, nesting too deep to parse) raises RecordError, one line naming the file. A
    record of a newer attnlab is read where its fields are known, with one warning naming the rest."""
    try:
        check_size(Path(path), "record")
        data = json.loads(Path(path).read_text(encoding="utf-8"))
        check_record_data(data)
        record = from_json_dict(data, path=Path(path))
        _note_newer(path, data)
        return record
    except RecordError as exc:
        raise RecordError(f"{path}: {exc}") from None
    except UserError as exc:  # past the size limit: the message names the file
        raise RecordError(str(exc)) from None
    except (OSError, ValueError, KeyError, TypeError, AttributeError, OverflowError, RecursionError) as exc:
        reason = (str(exc).splitlines() or [""])[0][:200]
        raise RecordError(f"{path}: {type(exc).__name__}: {reason}") from None


_NOTED: set[str] = set()  # the files warned about: once each, however often a process reads them


def _note_newer(path: Path, data: dict[str, Any]) -> None:
    """One line for a record written by a newer attnlab: its format version, the keys not read."""
    version = data.get("format_version", 1)
    unread = ["".join(c if c.isprintable() else "?" for c in key[:60]) for key in unread_keys(data)]
    if (version <= FORMAT_VERSION and not unread) or str(path) in _NOTED:
        return
    _NOTED.add(str(path))
    newer = f"format_version {version}, this attnlab reads up to {FORMAT_VERSION}; " if version > FORMAT_VERSION else ""
    keys = f"not read: {', '.join(unread[:8])}{' ...' if len(unread) > 8 else ''}" if unread else "every key read"
    print(f"attnlab: warning: {path}: written by a newer attnlab ({newer}{keys}); read with the fields this one knows",
          file=sys.stderr)
