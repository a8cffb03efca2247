"""The documentation site: its reference pages equal the code's declared tables, and it builds strict."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from attnlab.diagnosis.codes import BY_CODE
from attnlab.model.finding_codes import NAMES
from attnlab.modules.registry import list_variants
from attnlab.plugin_folders import builtin_groups
from attnlab.reporting.reference_pages import PAGES
from attnlab.schema import KEYS

ROOT = Path(__file__).resolve().parents[2]
REFERENCE = ROOT / "docs" / "reference"


def _first_column(page: str) -> list[str]:
    return re.findall(r"^\| `([^`]+)` \|", page, flags=re.MULTILINE)


@pytest.mark.parametrize("name", sorted(PAGES))
def test_each_committed_reference_page_is_what_the_code_generates(name: str) -> None:
    assert (REFERENCE / name).read_text(encoding="utf-8") == PAGES[name](), (
        f"docs/reference/{name} is stale: run python -m attnlab.reporting.reference_pages docs/reference")


def test_the_pages_name_every_code_every_key_and_every_built_in_variant() -> None:
    assert _first_column((REFERENCE / "codes.md").read_text()) == [*BY_CODE, *NAMES]
    assert _first_column((REFERENCE / "configuration.md").read_text()) == [key.name for key in KEYS]
    builtin = [name for group in builtin_groups() for name in list_variants(tag=group)]
    assert sorted(_first_column((REFERENCE / "variants.md").read_text())) == sorted(builtin)


@pytest.mark.slow
def test_the_site_builds_strict_and_offline(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-q", "-d", str(tmp_path / "site")],
                          cwd=ROOT, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})
    assert done.returncode == 0, done.stderr
    page = (tmp_path / "site" / "reference" / "configuration" / "index.html").read_text()
    assert "timeout_s" in page and "fonts.googleapis.com" not in page  # no web font fetched by the reader
