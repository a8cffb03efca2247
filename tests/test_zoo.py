"""`python -m attnlab.zoo` in a subprocess: a survey of two types writes its table and page, and a
second run of the same folder surveys nothing again."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("transformers")


@pytest.mark.slow
def test_the_survey_writes_its_table_and_page_and_resumes(tmp_path: Path) -> None:
    command = [sys.executable, "-m", "attnlab.zoo", "--out", str(tmp_path / "s"), "--types", "llama,resnet"]
    first = subprocess.run(command, capture_output=True, text=True, timeout=600)
    assert first.returncode == 0, first.stderr
    table = (tmp_path / "s" / "zoo.csv").read_text().splitlines()
    assert table[0].startswith("type,class,outcome,")
    assert [line.split(",")[:3] for line in table[1:]] == [["llama", "LlamaAttention", "ok"],
                                                          ["resnet", "", "no_attention"]]
    assert "| ok | runs, status ok, no error finding | 1 | 1 (100%) |" in (tmp_path / "s" / "zoo.md").read_text()
    started = (tmp_path / "s" / "rows" / "llama.started").stat().st_mtime_ns
    again = subprocess.run(command, capture_output=True, text=True, timeout=600)
    assert again.returncode == 0, again.stderr
    assert (tmp_path / "s" / "rows" / "llama.started").stat().st_mtime_ns == started  # done: not run again


@pytest.mark.slow
def test_the_whole_model_survey_writes_its_table_and_page(tmp_path: Path) -> None:
    command = [sys.executable, "-m", "attnlab.zoo", "--models", "--out", str(tmp_path / "m"), "--types", "llama,mamba"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    table = (tmp_path / "m" / "zoo_models.csv").read_text().splitlines()
    assert table[0] == "type,run,outcome,declared,errors,kl,seconds,message,transformers"
    assert [line.split(",")[:3] for line in table[1:]] == [["llama", "own:LlamaAttention in model.layers.0.self_attn", "ok"],
                                                          ["mamba", "", "no_attention"]]
    page = (tmp_path / "m" / "zoo_models.md").read_text()
    assert "2 types; 1 built and run by transformers, with attention; ok: 1 of those (100%)." in page
