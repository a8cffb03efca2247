"""The record on disk: JSON only, atomic, NaN-safe, large stages not inlined."""

from __future__ import annotations

import json

import numpy as np
import pytest

from attnlab.record import INLINE_LIMIT, Finding, Prediction, Record, RecordError, read_record, write_record


def make_record(n_tokens: int = 3) -> Record:
    weights = np.full((n_tokens, n_tokens), 1 / n_tokens, dtype=np.float32)
    return Record(
        variant="unscaled", seed=1, config={"weights": "shared", "inputs": {"kind": "book"}},
        n_tokens=n_tokens, d_in=3, d_out=2, labels=[f"t{i}" for i in range(n_tokens)],
        stages={"weights": weights}, stage_shapes={"weights": [n_tokens, n_tokens]},
        diagnostics={"divergence_weights": 0.5, "softmax_dim": float("nan"), "x": float("inf")},
        findings=[Finding("scaling", "scaled_scores", "error", "scaled by 1.0, expected 0.7071")],
        predictions=[Prediction("context_shape", [6, 2], [6, 2], True)],
    )


def test_round_trip_keeps_every_field(tmp_path):
    record = make_record()
    path = write_record(record, tmp_path)
    again = read_record(path)
    assert again.variant == "unscaled" and again.findings == record.findings and again.predictions == record.predictions
    np.testing.assert_array_equal(again.stages["weights"], record.stages["weights"])
    assert again.diagnostics["divergence_weights"] == 0.5
    assert np.isnan(again.diagnostics["softmax_dim"]) and again.diagnostics["x"] == float("inf")


def test_the_file_is_standard_json_without_nan_literals(tmp_path):
    text = write_record(make_record(), tmp_path).read_text()
    assert "NaN" not in text.replace('"nan"', "")
    json.loads(text, parse_constant=lambda c: pytest.fail(f"non-standard constant {c}"))


def test_large_stages_are_not_inlined(tmp_path):
    n = int(INLINE_LIMIT**0.5) + 1
    data = json.loads(write_record(make_record(n), tmp_path).read_text())
    assert data["stages"]["weights"] == {"shape": [n, n], "values": None}


def test_atomic_write_leaves_no_temp_files(tmp_path):
    write_record(make_record(), tmp_path)
    write_record(make_record(), tmp_path)
    assert [p.name for p in tmp_path.iterdir()] == ["record.json"]


def test_unreadable_records_raise_a_record_error_naming_the_path(tmp_path):
    path = tmp_path / "record.json"
    path.write_text('{"variant": "x"')
    with pytest.raises(RecordError, match=str(path)):
        read_record(path)
    path.write_text('{"seed": 1}')
    with pytest.raises(RecordError, match="KeyError"):
        read_record(path)
