"""The terminal summary a learner reads first."""

from __future__ import annotations

import io

import attnlab
from attnlab.record import Record, Side
from attnlab.sinks.terminal import format_matrix, print_record


def summary(record: Record) -> str:
    out = io.StringIO()
    print_record(record, out)
    return out.getvalue()


def test_summary_has_config_shapes_weights_context_divergence_and_findings():
    text = summary(attnlab.run("unscaled").record)
    assert text.splitlines()[0].startswith("attnlab · variant=unscaled seed=123")
    assert "shapes: inputs (6, 3) · queries (6, 2) · keys (6, 2) · values (6, 2) · scores (6, 6)" in text
    assert "attention weights (unscaled):" in text and "context vectors (unscaled):" in text
    assert "first divergent stage: scaled_scores" in text
    assert "[scaling @ scaled_scores]" in text and "0.7071" in text


def test_a_wrong_shape_is_marked_against_the_prediction():
    text = summary(attnlab.run("d_in_projection").record)
    assert "values (6, 3) ✗ predicted (6, 2)" in text


def test_native_weights_without_findings_do_not_claim_a_match():
    text = summary(attnlab.run("linear", seed=789, weights="native").record)
    assert "matches the reference" not in text
    assert "values differ from the reference from queries on (weights=native" in text


def test_a_failed_record_prints_its_error():
    record = Record(variant=Side("x"), seed=1, config={"inputs": {"kind": "book"}, "weights": "shared"}, status="failed",
                    error="variant 'x' raised RuntimeError: boom")
    assert "FAILED: variant 'x' raised RuntimeError: boom" in summary(record)


def test_large_matrices_are_cut():
    import numpy as np

    text = format_matrix(np.zeros((20, 20)), [f"t{i}" for i in range(20)], None)
    assert "… 12 more rows" in text and len(text.splitlines()) == 10


def test_one_hidden_row_is_one_row():
    import numpy as np

    labels = [f"t{i}" for i in range(9)]
    assert format_matrix(np.zeros((9, 2)), labels, None).splitlines()[-1].strip() == "… 1 more row"
    assert format_matrix(np.zeros((10, 2)), labels + ["t9"], None).splitlines()[-1].strip() == "… 2 more rows"


def test_paths_are_shown_relative_to_the_working_folder(tmp_path, monkeypatch):
    from attnlab.shown_paths import display_path

    monkeypatch.chdir(tmp_path)
    assert display_path(tmp_path / "runs" / "a" / "record.json") == "runs/a/record.json"
    assert display_path("runs/multirun/x") == "runs/multirun/x"
    assert display_path("/elsewhere/record.json") == "/elsewhere/record.json"
