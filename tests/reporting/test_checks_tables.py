"""docs/guide/checks.md's finding-code tables are what the declared codes generate."""

from __future__ import annotations

from pathlib import Path

import pytest

from attnlab.reporting.checks_tables import markdown_table, refreshed

PAGE = Path(__file__).resolve().parents[2] / "docs" / "guide" / "checks.md"


def test_the_committed_tables_are_what_the_declarations_generate() -> None:
    text = PAGE.read_text(encoding="utf-8")
    assert text == refreshed(text), "docs/guide/checks.md is stale: run python -m attnlab.reporting.checks_tables"


def test_a_page_without_a_table_s_markers_is_refused() -> None:
    with pytest.raises(ValueError, match="marks no table book"):
        refreshed("# no tables\n")


def test_a_table_lists_its_codes_with_their_severity() -> None:
    table = markdown_table("deliberate").splitlines()
    assert table[0] == "| code | stage | what it says | shown by |"
    assert any(line.startswith("| `rotary` (info) | queries |") for line in table)
    assert any(line.startswith("| `rotary_misapplied` | queries / keys / values |") for line in table)
