"""Issue 43 (10): a user's text is data, never config grammar: a `${...}` in it is analysed as
written (never read from the environment, never in the record), and `, ' = {} %` are accepted."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import attnlab

SECRET = "hunter2-not-for-records"
TEXTS = ["${oc.env:ATTNLAB_TEST_SECRET}", "a, b", "it's", "x=y", "{a}", "100%", "\\${oc.env:ATTNLAB_TEST_SECRET}"]


def _spoken(labels: list[str]) -> str:
    return "".join(labels).replace("·", " ")  # the labels show a leading space as ·


def _files_holding(folder: Path, needle: str) -> list[Path]:
    return [p for p in folder.rglob("*") if p.is_file() and needle.encode() in p.read_bytes()]


@pytest.mark.parametrize("text", TEXTS)
def test_the_python_api_analyses_text_as_written(text, tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("ATTNLAB_TEST_SECRET", SECRET)
    monkeypatch.chdir(tmp_path)
    result = attnlab.run(inputs={"kind": "text", "text": text}, out_dir=tmp_path / "job", log={"tensorboard": False})
    record = json.loads((tmp_path / "job" / "record.json").read_text())
    assert record["config"]["inputs"]["text"] == text
    assert _spoken(result.record.labels) == text
    assert _files_holding(tmp_path, SECRET) == []


def test_a_resolver_in_a_text_creates_nothing(tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    attnlab.run(inputs={"kind": "text", "text": "${attnlab.new_dir:made_by_text}"})
    assert not (tmp_path / "made_by_text").exists()


@pytest.mark.slow
def test_an_escaped_interpolation_on_the_command_line_is_resolved_once(app, tmp_path) -> None:
    run = app("inputs=text", "inputs.text=\\${oc.env:ATTNLAB_TEST_SECRET}", "log.tensorboard=false",
              env={"ATTNLAB_TEST_SECRET": SECRET})
    assert run.returncode == 0, run.stderr
    assert run.record["config"]["inputs"]["text"] == "${oc.env:ATTNLAB_TEST_SECRET}"
    assert SECRET not in run.stdout and _files_holding(run.out_dir, SECRET) == []
