"""The survey's runner with a worker of the test's own: a hang and a dying interpreter each take
their worker, are run once more, and become a timeout and a crash row; a rerun skips what is done."""

from __future__ import annotations

import json
import os
import sys
import textwrap
from pathlib import Path

import pytest

from attnlab.conformance.runner import run_survey
from attnlab.conformance.store import attempts, from_csv, rows, to_csv

WORKER = '''
import os, sys, time
from pathlib import Path
from attnlab.conformance.store import mark_started, write_row
from attnlab.conformance.survey import Row

folder = Path(sys.argv[1])
for t in sys.argv[2:]:
    if (folder / "rows" / f"{t}.json").exists():
        continue
    mark_started(folder, t)
    if t == "hang":
        time.sleep(60)
    if t == "die":
        os._exit(3)
    write_row(folder, Row(t, cls="X", outcome="ok", seconds=0.1))
'''


@pytest.fixture
def worker(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    (tmp_path / "fake_zoo_worker.py").write_text(textwrap.dedent(WORKER))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(tmp_path), *sys.path]))
    return "fake_zoo_worker"


@pytest.mark.slow
def test_a_hang_and_a_dead_worker_are_rows_and_every_other_type_runs(tmp_path: Path, worker: str) -> None:
    folder = tmp_path / "survey"
    run_survey(folder, ["a", "hang", "b", "die", "c"], jobs=2, timeout=3, chunk=3, progress=False, worker=worker)
    found = {r.type: r for r in rows(folder)}
    assert {t: r.outcome for t, r in found.items()} == {"a": "ok", "b": "ok", "c": "ok", "hang": "timeout",
                                                        "die": "crash"}
    assert attempts(folder, "hang") == 2 and attempts(folder, "die") == 2  # each run once more, then given up
    assert attempts(folder, "a") == 1

    run_survey(folder, ["a", "hang", "b", "die", "c", "d"], jobs=1, timeout=3, progress=False, worker=worker)
    assert attempts(folder, "a") == 1 and attempts(folder, "hang") == 2  # done types are skipped
    assert json.loads((folder / "rows" / "d.json").read_text())["outcome"] == "ok"


def test_the_table_reads_back_what_it_wrote(tmp_path: Path, worker: str) -> None:
    from attnlab.conformance.survey import Row

    written = [Row("llama", "LlamaAttention", "ok", True, ["rotary@queries"], [], 0.5, ""),
               Row("x", "", "missing_input", True, [], [], 0.1, "forward needs 'g', a comma, here")]
    back, version = from_csv(to_csv(written, "5.25.0"))
    assert back == written and version == "5.25.0"
