"""The README and the guide pages run as a test: every example with a shown output is run, in the
site's order, in one temporary folder and its output compared with the page's (tests/readme/examples.py says how); examples
marked "not run in tests" are listed as skipped with the README's reason. After a change of
output, `python tests/readme/refresh.py` rewrites the README's shown outputs from real runs."""

from __future__ import annotations

import difflib

import pytest

from tests.readme.examples import fresh_folder, guide_examples, matches, normalise, run_all

EXAMPLES = guide_examples()


@pytest.fixture(scope="module")
def ran(tmp_path_factory):
    run_all(EXAMPLES, fresh_folder(tmp_path_factory.mktemp("readme")))
    return EXAMPLES


@pytest.mark.slow
@pytest.mark.parametrize("index", range(len(EXAMPLES)), ids=[e.name for e in EXAMPLES])
def test_a_readme_example_prints_what_the_readme_shows(ran, index):
    example = ran[index]
    if example.not_run:
        pytest.skip(f"not run in tests: {example.not_run}")
    for command in example.commands:
        if not matches(command.shown, command.got):
            diff = "\n".join(difflib.unified_diff([normalise(x) for x in command.shown],
                                                  [normalise(x) for x in command.got], "README", "run", lineterm=""))
            pytest.fail(f"{command.line}\n{diff}\n(python tests/readme/refresh.py rewrites the README from real runs)")


def test_the_collector_finds_the_readme_s_examples_and_its_marks():
    kinds = {e.kind for e in EXAMPLES}
    assert {"shell", "python", "file"} <= kinds
    assert len([e for e in EXAMPLES if e.kind == "shell" and not e.not_run]) >= 15
    assert all(e.not_run.strip() for e in EXAMPLES if e.not_run)


def test_matching_ignores_run_folders_and_elided_lines_but_nothing_else():
    shown = ["first", "...", "record: runs/2026-11-30/12-20-56-unscaled/record.json"]
    assert matches(shown, ["first", "a", "b", "record: runs/2027-01-02/09-00-00-unscaled/record.json"])
    assert matches(shown, ["first", "record: runs/2027-01-02/09-00-00-unscaled/record.json"])
    assert not matches(shown, ["first", "record: runs/2027-01-02/09-00-00-scaled/record.json"])
    assert not matches(["0.2609"], ["0.260"])


def test_a_refresh_keeps_each_elision_and_the_lines_the_readme_kept_around_it():
    from tests.readme.examples import refreshed

    shown = ["head", "...", "findings:", "  [a]", "record: runs/2026-11-30/12-20-56-x/record.json"]
    got = ["head", "x", "y", "findings:", "  [b]", "record: runs/2027-01-01/00-00-00-x/record.json", "report: r.html"]
    assert refreshed(shown, got) == ["head", "...", *got[3:]]  # a new last line does not push "findings:" out
    assert refreshed(["a", "b"], ["c"]) == ["c"]
