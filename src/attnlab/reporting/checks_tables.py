"""The finding-code tables of docs/guide/checks.md, generated from the codes declared beside their
checks (attnlab.diagnosis.finding_code): `python -m attnlab.reporting.checks_tables` rewrites them
in place, between each `<!-- codes:TABLE:start -->` and `<!-- codes:TABLE:end -->`."""

from __future__ import annotations

import re
import sys
from pathlib import Path

from attnlab.diagnosis.codes import CODES
from attnlab.diagnosis.finding_code import FIRST_WHERE_IT_SHOWS, TABLES, Code

PAGE = Path("docs/guide/checks.md")
_BLOCK = re.compile(r"(<!-- codes:(\w+):start -->\n).*?(\n<!-- codes:\2:end -->)", flags=re.DOTALL)


def _shown_by(code: Code) -> str:
    """Built-in variants by name, tests by their file."""
    return ", ".join(dict.fromkeys(f"`{shown.split('::')[0]}`" for shown in code.shown_by))


def markdown_table(table: str) -> str:
    """The codes one table of the page documents, in the order their checks run."""
    lines = ["| code | stage | what it says | shown by |", "|---|---|---|---|"]
    for c in CODES:
        if c.table == table:
            name = f"`{c.code}`" + (" (info)" if c.severity == "info" else "")
            stage = "first stage where it shows" if c.stages == FIRST_WHERE_IT_SHOWS else " / ".join(c.stages)
            lines.append(f"| {name} | {stage} | {c.doc} | {_shown_by(c)} |")
    return "\n".join(lines)


def refreshed(page: str) -> str:
    """The page with each marked table generated afresh; a table the page does not mark is an error."""
    missing = [t for t in TABLES if f"<!-- codes:{t}:start -->" not in page]
    if missing:
        raise ValueError(f"the page marks no table {', '.join(missing)}; each of {', '.join(TABLES)} needs "
                         f"<!-- codes:NAME:start --> and <!-- codes:NAME:end -->")
    return _BLOCK.sub(lambda m: m[1] + markdown_table(m[2]) + m[3], page)


if __name__ == "__main__":
    path = Path(sys.argv[1]) if len(sys.argv) > 1 else PAGE
    path.write_text(refreshed(path.read_text(encoding="utf-8")), encoding="utf-8")
    print(path)
