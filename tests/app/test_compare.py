"""`attnlab compare PATH... [--out FILE] [--filter key=value]` over any folders of runs."""

from __future__ import annotations

import json
import runpy
import sys
from pathlib import Path

import pandas as pd
import pytest

from attnlab.app.compare import main
from attnlab.record import Record, Side, write_record


def write(folder: Path, variant: str, seed: int) -> Path:
    record = Record(variant=Side(variant, diagnostics={"weights_entropy_mean": float(seed)}), seed=seed,
                    config={"inputs": {"kind": "book"}, "weights": "shared"}, n_tokens=2, d_in=3, d_out=2)
    return write_record(record, folder)


@pytest.fixture
def runs(tmp_path: Path) -> list[Path]:
    """A single run's folder and a sweep folder, as `python -m attnlab` lays them out."""
    single = tmp_path / "runs" / "2026-01-01" / "10-00-00-reference"
    write(single, "reference", 7)
    sweep = tmp_path / "runs" / "multirun" / "2026-01-01" / "11-00-00"
    for num, (variant, seed) in enumerate([("reference", 1), ("unscaled", 1), ("unscaled", 2)]):
        write(sweep / f"{num}-seed={seed},variant={variant}", variant, seed)
    return [single, sweep]


def test_prints_one_row_per_record_from_single_runs_and_sweeps(runs, capsys) -> None:
    assert main([str(p) for p in runs]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split()[:2] == ["variant", "seed"] and len(lines) == 5


@pytest.mark.parametrize("suffix", [".csv", ".md", ".html"])
def test_out_format_follows_the_suffix(runs, tmp_path, suffix) -> None:
    out = tmp_path / f"table{suffix}"
    assert main([*map(str, runs), "--out", str(out)]) == 0
    text = out.read_text()
    if suffix == ".csv":
        assert len(pd.read_csv(out)) == 4
    elif suffix == ".md":
        assert text.startswith("# attnlab comparison") and "| unscaled" in text
    else:
        assert text.startswith("<!DOCTYPE html>") and "unscaled" in text


def test_filters_match_columns_as_text_and_combine(runs, tmp_path) -> None:
    out = tmp_path / "f.csv"
    assert main([*map(str, runs), "--filter", "variant=unscaled", "--filter", "seed=2", "--out", str(out)]) == 0
    table = pd.read_csv(out)
    assert list(table["variant"]) == ["unscaled"] and list(table["seed"]) == [2]


def test_unknown_filter_column_and_no_match_are_one_line_errors(runs, capsys) -> None:
    assert main([*map(str, runs), "--filter", "colour=red"]) == 2
    assert main([*map(str, runs), "--filter", "variant=nope"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2 and "no column 'colour'" in err[0] and "no record matches" in err[1]


def test_truncated_and_partial_records_are_reported_by_path_and_skipped(runs, capsys) -> None:
    truncated = runs[1] / "8-bad" / "record.json"
    truncated.parent.mkdir()
    truncated.write_text(json.dumps({"variant": "reference", "seed": 3})[:20])
    partial = runs[1] / "9-partial" / "record.json"
    partial.parent.mkdir()
    partial.write_text(json.dumps({"seed": 3, "status": "ok"}))  # no variant
    assert main([str(runs[1])]) == 0
    out, err = capsys.readouterr()
    assert len(out.splitlines()) == 4
    err_lines = err.strip().splitlines()
    assert len(err_lines) == 2 and str(truncated) in err and str(partial) in err


def test_unknown_suffix_is_exit_2_with_one_line(runs, tmp_path, capsys) -> None:
    assert main([str(runs[0]), "--out", str(tmp_path / "t.xlsx")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "'.xlsx'" in err[0] and not (tmp_path / "t.xlsx").exists()


def test_no_records_is_exit_2_with_one_line(tmp_path, capsys) -> None:
    assert main([str(tmp_path)]) == 2
    assert len(capsys.readouterr().err.strip().splitlines()) == 1


def test_missing_path_is_named_and_the_rest_still_compared(runs, tmp_path, capsys) -> None:
    assert main([str(tmp_path / "nowhere"), str(runs[0])]) == 0
    assert "nowhere: no such file or folder" in capsys.readouterr().err


def test_attnlab_compare_is_dispatched_by_the_cli(runs, capsys) -> None:
    from attnlab.app.cli import main as cli_main

    assert cli_main(["compare", str(runs[1]), "--filter", "variant=unscaled"]) == 0
    assert len(capsys.readouterr().out.splitlines()) == 3


@pytest.mark.filterwarnings("ignore:'attnlab.app.compare' found in sys.modules")  # imported above: harmless
def test_python_m_attnlab_compare_runs_main(runs, capsys, monkeypatch) -> None:
    monkeypatch.setattr(sys, "argv", ["attnlab.app.compare", str(runs[0])])
    with pytest.raises(SystemExit) as exit_:
        runpy.run_module("attnlab.app.compare", run_name="__main__", alter_sys=True)
    assert exit_.value.code == 0 and "reference" in capsys.readouterr().out
