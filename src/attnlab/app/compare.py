"""`attnlab compare PATH... [--out FILE] [--filter key=value ...]`: tables from any folders of runs.

Single runs, sweeps, an interrupted sweep, folders copied back from a cluster: whatever holds
record.json files. Records are JSON and are only ever parsed as JSON (nothing is unpickled). A
record that cannot be read is named on stderr and skipped, so one bad file never hides the rest.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from attnlab.errors import UserError
from attnlab.record import Record
from attnlab.reporting.aggregate import Report, find_record_files, load_records, terminal_table
from attnlab.reporting.rows import record_row
from attnlab.sinks.html import write_html_report
from attnlab.sinks.table import write_csv_report, write_markdown_report

PROG = "attnlab compare"
WRITERS = {".csv": write_csv_report, ".md": write_markdown_report, ".html": write_html_report}  # the sinks' own writers


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog=PROG,
        description="Build the comparison tables from the record.json files under PATHs.",
    )
    parser.add_argument("paths", nargs="+", type=Path, metavar="PATH", help="run or sweep folders, or record.json files")
    parser.add_argument("--out", type=Path, metavar="FILE", help=f"write the table here; format from the suffix ({', '.join(WRITERS)})")
    parser.add_argument("--filter", action="append", default=[], metavar="KEY=VALUE",
                        help="keep rows whose column KEY equals VALUE as text (repeatable; all must match)")
    return parser.parse_args(argv)


def parse_filters(filters: list[str]) -> list[tuple[str, str]]:
    pairs = []
    for item in filters:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise UserError(f"--filter {item}: expected KEY=VALUE, e.g. --filter variant=unscaled")
        pairs.append((key, value))
    return pairs


def _as_text(value: object) -> str:
    return "" if value is None else str(value)


def apply_filters(records: list[Record], filters: list[tuple[str, str]]) -> list[Record]:
    """Keep the records whose table row matches every KEY=VALUE, comparing as text."""
    rows = [record_row(r) for r in records]
    columns = {c for row in rows for c in row}
    for key, _ in filters:
        if key not in columns:
            raise UserError(f"--filter {key}=...: no column '{key}'; columns: {', '.join(sorted(columns))}")
    return [r for r, row in zip(records, rows) if all(_as_text(row.get(k)) == v for k, v in filters)]


def check_out(out: Path | None) -> None:
    if out is not None and out.suffix.lower() not in WRITERS:
        raise UserError(f"--out {out}: unknown format '{out.suffix}'; use one of {', '.join(WRITERS)}")


def load(paths: list[Path]) -> list[Record]:
    """Every readable record under `paths`; each problem is one line on stderr."""
    for path in paths:
        if not path.exists():
            print(f"{PROG}: {path}: no such file or folder", file=sys.stderr)
    records, problems = load_records(find_record_files(p for p in paths if p.exists()))
    for problem in problems:
        print(f"{PROG}: skipped {problem}", file=sys.stderr)
    return records


def run(args: argparse.Namespace) -> None:
    check_out(args.out)
    filters = parse_filters(args.filter)
    records = load(args.paths)
    if not records:
        raise UserError(f"no readable record.json under {', '.join(map(str, args.paths))}")
    records = apply_filters(records, filters)
    if not records:
        raise UserError(f"no record matches {' '.join(args.filter)}")
    report = Report(records)
    if args.out is None:
        print(terminal_table(report.jobs))
    else:
        print(f"{PROG}: {len(records)} record(s) -> {WRITERS[args.out.suffix.lower()](report, args.out)}")


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of `attnlab compare` (dispatched by attnlab.app.cli) and `python -m attnlab.app.compare`."""
    args = parse_args(sys.argv[1:] if argv is None else list(argv))
    try:
        run(args)
    except UserError as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:  # a full disk, a size limit, a read-only folder: the file and the cause
        where = f"{exc.filename}: " if getattr(exc, "filename", None) else ""
        print(f"{PROG}: error: {where}{exc.strerror or exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
