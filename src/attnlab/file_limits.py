"""Size limits on the files attnlab reads: a file far larger than any of its kind is refused in one
line before it is read (a tokenizer.json of hundreds of MB aborted the process in its parser, with
no record). ATTNLAB_MAX_FILE_MB raises every limit at once."""

from __future__ import annotations

import os
from pathlib import Path

from attnlab.errors import UserError

LIMIT_ENV = "ATTNLAB_MAX_FILE_MB"
LIMITS_MB = {"config": 16, "tokenizer": 128, "inputs": 1024, "record": 1024}  # far above any real one


def limit_mb(kind: str) -> float:
    try:
        return float(os.environ.get(LIMIT_ENV) or LIMITS_MB[kind])
    except ValueError:
        raise UserError(f"{LIMIT_ENV}={os.environ[LIMIT_ENV]}: must be a number of megabytes") from None


def check_size(path: Path, kind: str) -> None:
    """Raise UserError when `path` (a `kind` file: config, tokenizer, inputs, record) is past its limit."""
    try:
        size = Path(path).stat().st_size
    except OSError:
        return  # the reader says why it cannot read it
    limit = limit_mb(kind)
    if size > limit * 2**20:
        raise UserError(f"{path}: {size / 2**20:.0f} MB, past the {limit:g} MB limit of {kind} files "
                        f"({LIMIT_ENV} raises it)")


__all__ = ["check_size"]
