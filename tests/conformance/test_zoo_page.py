"""docs/reference/zoo.md is the page the code generates from the committed survey table."""

from __future__ import annotations

from pathlib import Path

from attnlab.conformance.store import from_csv
from attnlab.conformance.survey import OUTCOMES, Row
from attnlab.conformance.zoo_page import page

DOCS = Path(__file__).parents[2] / "docs" / "reference"


def test_the_published_page_is_generated_from_the_committed_table() -> None:
    rows, version = from_csv((DOCS / "zoo.csv").read_text())
    assert (DOCS / "zoo.md").read_text() == page(rows, version), (
        "docs/reference/zoo.md is stale: run python -m attnlab.zoo --table-only --out FOLDER or regenerate from "
        "docs/reference/zoo.csv (benchmarks/zoo_survey.py)")


def test_the_counts_are_counted_per_outcome_and_among_the_types_that_define_attention() -> None:
    rows = [Row("a", outcome="ok", defines_attention=True), Row("b", outcome="ok", defines_attention=True),
            Row("c", outcome="crash", defines_attention=True), Row("d", outcome="no_attention_class")]
    text = page(rows, "9.9")
    assert text.startswith("# Every attention class in transformers 9.9 against the book")
    assert "| ok | runs, status ok, no error finding | 2 | 2 (67%) |" in text
    assert "| crash | a Python exception, not a one-line error | 1 | 1 (33%) |" in text
    assert "| no_attention_class | attnlab found no attention class in the type's modeling module | 1 | 0 (0%) |" in text
    assert [line.split(" | ")[0] for line in text.splitlines() if line.startswith("| ") and " | runs" in line] == [
        "| ok", "| error_finding"]
    assert len(OUTCOMES) == 10


def test_a_model_without_attention_is_counted_apart_from_those_defining_attention() -> None:
    rows = [Row("a", outcome="ok", defines_attention=True), Row("r", outcome="no_attention")]
    text = page(rows, "9.9")
    assert "2 model types; 1 have a modeling module that defines an attention `nn.Module`." in text
    assert "| ok | runs, status ok, no error finding | 1 | 1 (100%) |" in text
    assert "| no_attention | the type's model builds no attention module" in text and text.count("| 1 | 0 (0%) |") == 1
