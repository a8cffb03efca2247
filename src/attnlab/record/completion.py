"""A job's completion mark: written last, after its records and every sink's files, so a job counts
as done only when all of its outputs are.

A process killed between a record and its report, heatmaps, TensorBoard event or MLflow run left an
ok record that a resumed sweep took as done, and the other outputs were never written. The mark
names the job's overrides and a digest of each of its record files: a resumed sweep skips a job only
when its mark is there and its records are still the files it names (a record copied from another
job is not).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from pathlib import Path

from attnlab.record.files import RECORD_FILE, write_atomic

DONE_FILE = ".attnlab-done.json"


def record_digests(job_dir: Path) -> dict[str, str]:
    """{record file under `job_dir`, relative: sha256 of its bytes}."""
    return {path.relative_to(job_dir).as_posix(): hashlib.sha256(path.read_bytes()).hexdigest()
            for path in sorted(Path(job_dir).rglob(RECORD_FILE))}


def mark_done(job_dir: Path, overrides: Sequence[str]) -> None:
    write_atomic(Path(job_dir) / DONE_FILE,
                 json.dumps({"overrides": list(overrides), "records": record_digests(job_dir)}), durable=True)


def unmark(job_dir: Path) -> None:
    """A job run again is not done until its outputs are written again; the temp files a killed
    run of it left (write_atomic's `.NAME.*.tmp`) are removed: only this job writes its folder."""
    (Path(job_dir) / DONE_FILE).unlink(missing_ok=True)
    if Path(job_dir).is_dir():
        for leftover in Path(job_dir).rglob(".*.tmp"):
            leftover.unlink(missing_ok=True)


def done_mark(job_dir: Path, overrides: Sequence[str]) -> str | None:
    """None when the job is done (its mark names these overrides and its records unchanged), else why not."""
    try:
        mark = json.loads((Path(job_dir) / DONE_FILE).read_text(encoding="utf-8"))
    except FileNotFoundError:
        return "its outputs were not all written (written from its records, if they are this job's)"
    except (OSError, ValueError) as exc:
        return f"its completion mark is unreadable ({type(exc).__name__})"
    if not isinstance(mark, dict) or mark.get("overrides") != list(overrides):
        return "its completion mark is another job's"
    try:
        digests = record_digests(job_dir)
    except OSError as exc:
        return f"a record cannot be read ({exc.strerror or exc})"
    if not digests or mark.get("records") != digests:
        return "its record files are not the ones it wrote"
    return None


__all__ = ["DONE_FILE", "done_mark", "mark_done", "record_digests", "unmark"]
