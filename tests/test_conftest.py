"""The fast tier's time budget (tests/conftest.py), run on a tiny suite of its own in-process."""

from __future__ import annotations

import pytest

pytest_plugins = ["pytester"]

SUITE = """
import time
import pytest

def test_quick():
    pass

def test_unmarked_and_slow():
    time.sleep(0.3)

@pytest.mark.slow
def test_marked_and_slow():
    time.sleep(0.3)
"""


@pytest.fixture
def tiny_suite(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> pytest.Pytester:
    pytester.makeconftest("from tests.conftest import pytest_configure, pytest_runtest_makereport  # the hooks under test\n")
    pytester.makeini("[pytest]\nmarkers = slow: slow\n")
    pytester.makepyfile(test_tiny=SUITE)
    monkeypatch.setenv("ATTNLAB_TEST_BUDGET", "0.1")
    monkeypatch.setenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", "1")  # the installed plugins (hydra's, xdist) take seconds
    return pytester


def test_an_unmarked_test_over_the_budget_fails_the_fast_tier_naming_itself_and_its_time(tiny_suite):
    result = tiny_suite.runpytest("-m", "not slow", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1, failed=1, deselected=1)
    result.stdout.re_match_lines([r".*test_tiny.py::test_unmarked_and_slow took 0\.\d s, over the fast tier's budget "
                                  r"of 0\.1 s \(ATTNLAB_TEST_BUDGET\): mark it @pytest.mark.slow"])


def test_the_full_suite_and_slow_tests_have_no_budget(tiny_suite):
    tiny_suite.runpytest("-p", "no:xdist", "-p", "no:cacheprovider").assert_outcomes(passed=3)


def test_a_budget_of_zero_is_none(tiny_suite, monkeypatch):
    monkeypatch.setenv("ATTNLAB_TEST_BUDGET", "0")
    tiny_suite.runpytest("-m", "not slow", "-p", "no:cacheprovider").assert_outcomes(passed=2, deselected=1)
