"""Records read back defensively: `attnlab compare` and a sweep's tables skip
a record.json of the wrong shape with one warning line naming it, never a traceback."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from attnlab.record import Record, RecordError, Side, read_record, write_record

GOOD = {"variant": "unscaled", "seed": 1, "status": "ok", "config": {}}
BAD = {
    "null": "null",
    "list": "[]",
    "seed_overflow": json.dumps(GOOD)[:-1] + ', "seed": 1e400}',
    "deep": "[" * 200_000 + "]" * 200_000,
    "no_status": json.dumps({k: v for k, v in GOOD.items() if k != "status"}),
    "status_maybe": json.dumps({**GOOD, "status": "maybe"}),
    "seed_text": json.dumps({**GOOD, "seed": "1"}),
    "diagnostics_list": json.dumps({**GOOD, "diagnostics": []}),
    "findings_numbers": json.dumps({**GOOD, "findings": [1]}),
    "seed_bool": json.dumps({**GOOD, "seed": True}),
}


@pytest.mark.parametrize("name", BAD)
def test_a_record_of_the_wrong_shape_is_one_record_error_naming_the_file(tmp_path, name) -> None:
    path = tmp_path / name / "record.json"
    path.parent.mkdir()
    path.write_text(BAD[name])
    with pytest.raises(RecordError) as caught:
        read_record(path)
    assert str(caught.value).startswith(f"{path}: ") and "\n" not in str(caught.value)


def write_bad_records(root: Path) -> None:
    for name, text in BAD.items():
        (root / name).mkdir(parents=True)
        (root / name / "record.json").write_text(text)


@pytest.mark.slow
def test_compare_skips_each_bad_record_with_one_line_and_tables_the_rest(tmp_path) -> None:
    write_record(Record(variant=Side("unscaled"), seed=1, config={"seed": 1}), tmp_path / "runs" / "good")
    write_bad_records(tmp_path / "runs")
    env = {k: v for k, v in os.environ.items() if k != "HYDRA_FULL_ERROR"}
    done = subprocess.run([sys.executable, "-m", "attnlab", "compare", "runs", "--out", "t.csv"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    warnings = done.stderr.splitlines()
    assert len(warnings) == len(BAD) and "Traceback" not in done.stderr
    assert sorted(line.split("/record.json: ")[0].rsplit("/", 1)[1] for line in warnings) == sorted(BAD)
    assert all(line.startswith("attnlab compare: skipped ") for line in warnings)
    assert done.stdout.startswith("attnlab compare: 1 record(s) -> ")
