"""Shared fixtures: the real app in a subprocess, and temp plugin folders."""

from __future__ import annotations

import json
import os
import subprocess
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.zygote_start import CLIENT, SOCKET_ENV, start_zygote

REPO = Path(__file__).resolve().parents[1]

# The fast tier's per-test budget (docs/guide/development.md): an unmarked test is marked slow past
# ~3 s on a quiet machine, and the budget leaves room for a loaded one (two workers, other jobs).
BUDGET_ENV = "ATTNLAB_TEST_BUDGET"
BUDGET_S = 10.0


def fast_tier_budget(config: pytest.Config) -> float | None:
    """Seconds an unmarked test's call may take, or None: only a run that leaves the slow tests out
    (`-m "not slow"`) has a budget, so the full suite never fails on a loaded machine's timing;
    ATTNLAB_TEST_BUDGET=0 turns it off."""
    if "not slow" not in (config.getoption("markexpr") or ""):
        return None
    budget = float(os.environ.get(BUDGET_ENV, BUDGET_S))
    return budget if budget > 0 else None


_BUDGET = pytest.StashKey[float | None]()


def pytest_configure(config: pytest.Config) -> None:
    # read once: a test that sets ATTNLAB_TEST_BUDGET for a suite it runs does not change its own
    config.stash[_BUDGET] = fast_tier_budget(config)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo) -> pytest.TestReport:
    report = yield
    budget = item.config.stash[_BUDGET]
    if (budget is not None and report.when == "call" and report.passed and report.duration > budget
            and item.get_closest_marker("slow") is None):
        report.outcome = "failed"
        report.longrepr = (f"{item.nodeid} took {report.duration:.1f} s, over the fast tier's budget of "
                           f"{budget:g} s ({BUDGET_ENV}): mark it @pytest.mark.slow or make it faster")
    return report

# The source's class, pasted verbatim: no import of attnlab at all.
SOURCE_SELF_ATTENTION_V1 = '''
import torch
import torch.nn as nn

class SelfAttention_v1(nn.Module):
    def __init__(self, d_in, d_out):
        super().__init__()
        self.W_query = nn.Parameter(torch.rand(d_in, d_out))
        self.W_key   = nn.Parameter(torch.rand(d_in, d_out))
        self.W_value = nn.Parameter(torch.rand(d_in, d_out))

    def forward(self, x):
        keys = x @ self.W_key
        queries = x @ self.W_query
        values = x @ self.W_value
        attn_scores = queries @ keys.T # omega
        attn_weights = torch.softmax(
            attn_scores / keys.shape[-1]**0.5, dim=-1
        )
        context_vec = attn_weights @ values
        return context_vec
'''


class AppRun:
    def __init__(self, proc: subprocess.CompletedProcess, out_dir: Path):
        self.proc, self.out_dir = proc, out_dir
        self.returncode, self.stdout, self.stderr = proc.returncode, proc.stdout, proc.stderr

    @property
    def record(self) -> dict:
        return json.loads((self.out_dir / "record.json").read_text())


@pytest.fixture(scope="session")
def zygote() -> Iterator[str]:
    """This worker's preloaded `python -m attnlab` (tests/zygote.py): its socket, or "" with
    ATTNLAB_TEST_ZYGOTE=0 (every run a fresh interpreter)."""
    yield from start_zygote()


@pytest.fixture
def app(tmp_path, zygote):
    """Run `python -m attnlab ARGS` for real, in a process of its own (forked from the worker's zygote,
    the imports done once); outputs go to tmp_path/out unless ARGS say otherwise."""

    def run(*args: str, cwd: Path | None = None, env: dict | None = None, out: str = "out") -> AppRun:
        out_dir = tmp_path / out
        argv = list(args)
        if not any(a.startswith(("hydra.run.dir=", "hydra.sweep.dir=", "-m", "--")) for a in argv):
            argv.append(f"hydra.run.dir={out_dir}")
        full_env = {**os.environ, **(env or {}), SOCKET_ENV: zygote}
        full_env.pop("HYDRA_FULL_ERROR", None)
        proc = subprocess.run(
            [*CLIENT, *argv], cwd=cwd or tmp_path, env=full_env, capture_output=True, text=True, timeout=300,
        )
        return AppRun(proc, out_dir)

    return run


@pytest.fixture(scope="session")
def ch03():
    """The source's chapter 3 classes (tests/fixtures/source/ch03.py, verbatim)."""
    from tests.fixtures.source import ch03

    return ch03


@pytest.fixture(scope="session")
def mha_impls():
    """The nine classes of the source's bonus notebook (tests/fixtures/source/mha_implementations.py)."""
    from tests.fixtures.source import mha_implementations

    return mha_implementations


@pytest.fixture
def plugin_folder(tmp_path):
    """Write plugin files into a fresh folder; returns a function name -> source -> folder."""
    folder = tmp_path / "user_plugins"
    folder.mkdir()

    def write(name: str, source: str) -> Path:
        (folder / f"{name}.py").write_text(textwrap.dedent(source))
        return folder

    return write


@pytest.fixture
def use_plugins(monkeypatch):
    """Put a folder on ATTNLAB_PLUGIN_PATH for in-process runs; the registry is rediscovered."""
    from attnlab.modules.registry import discover

    def use(folder: Path) -> None:
        monkeypatch.setenv("ATTNLAB_PLUGIN_PATH", str(folder))
        discover.cache_clear()

    yield use
    discover.cache_clear()


@pytest.fixture(autouse=True)
def no_terminal_width(monkeypatch):
    """The app's output as a pipe gets it, whatever runs the tests: pytest-xdist's workers set
    COLUMNS=80, and the terminal table fits itself to COLUMNS (a column cut at 80 is not there)."""
    monkeypatch.delenv("COLUMNS", raising=False)
    monkeypatch.delenv("LINES", raising=False)


@pytest.fixture(autouse=True)
def own_cache(monkeypatch, tmp_path_factory):
    """attnlab's cache (plugin import verdicts) in the test session's own folder, never the user's
    ~/.cache: a verdict an earlier run left there would decide this run's discovery."""
    from attnlab.modules.import_probe import CACHE_ENV

    monkeypatch.setenv(CACHE_ENV, str(tmp_path_factory.getbasetemp() / "attnlab-cache"))


@pytest.fixture(autouse=True)
def fresh_session(monkeypatch):
    """Each test starts with a session of its own: a notebook's variants and models registered by one
    test (`attnlab.run(Cls)`, `@attnlab.variant`) are never listed by the next."""
    from attnlab.modules import session

    monkeypatch.setattr(session, "_VARIANTS", {})
    monkeypatch.setattr(session, "_MODELS", {})
    session._VERSION[0] += 1
    yield
    session._VERSION[0] += 1  # the registry's view of the session is keyed by this: rebuilt after
