"""The record on disk: JSON only, atomic, NaN-safe, large stages not inlined."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest

from attnlab.record import (
    INLINE_LIMIT,
    Finding,
    Prediction,
    Record,
    RecordError,
    Side,
    keeping_stages,
    read_record,
    to_json_dict,
    without_stages,
    write_record,
    written,
)


def make_record(n_tokens: int = 3) -> Record:
    """A 2-D module's record: stages and shapes in the module's own rank."""
    weights = np.full((n_tokens, n_tokens), 1 / n_tokens, dtype=np.float32)  # (query, key)
    return Record(
        variant=Side("unscaled", {"weights": weights}, {"weights": [n_tokens, n_tokens]},
                     diagnostics={"divergence_weights": 0.5, "softmax_dim": float("nan"), "x": float("inf")}),
        seed=1, config={"weights": "shared", "inputs": {"kind": "book"}},
        n_tokens=n_tokens, d_in=3, d_out=2, labels=[f"t{i}" for i in range(n_tokens)],
        expected_shapes={"weights": [n_tokens, n_tokens]},
        missing_stages=["weights_applied"], reconstructed_stages=["scores"], output_is_context=True,
        head_diagnostics={"divergence_weights": [0.5, float("nan")]},
        findings=[Finding("scaling", "scaled_scores", "error", "scaled by 1.0, expected 0.7071")],
        predictions=[Prediction("context_shape", [6, 2], [6, 2], True)],
    )


def test_round_trip_keeps_every_field(tmp_path):
    record = make_record()
    path = write_record(record, tmp_path)
    again = read_record(path)
    assert again.variant.name == "unscaled" and again.findings == record.findings and again.predictions == record.predictions
    np.testing.assert_array_equal(again.variant.stages["weights"], record.variant.stages["weights"])
    assert again.variant.stages["weights"].shape == (3, 3) and again.variant.shapes == {"weights": [3, 3]}
    assert again.variant.canonical("weights").shape == (1, 1, 3, 3)
    np.testing.assert_array_equal(again.variant.matrix("weights"), np.full((3, 3), 1 / 3, dtype=np.float32))
    assert again.reference.name == "reference" and again.expected_shapes == {"weights": [3, 3]}
    assert again.missing_stages == ["weights_applied"] and again.reconstructed_stages == ["scores"]
    assert again.output_is_context is True
    assert again.head_diagnostics["divergence_weights"][0] == 0.5
    assert np.isnan(again.head_diagnostics["divergence_weights"][1])
    assert again.variant.diagnostics["divergence_weights"] == 0.5
    assert np.isnan(again.variant.diagnostics["softmax_dim"]) and again.variant.diagnostics["x"] == float("inf")


def test_the_file_is_standard_json_without_nan_literals(tmp_path):
    text = write_record(make_record(), tmp_path).read_text()
    assert "NaN" not in text.replace('"nan"', "")
    json.loads(text, parse_constant=lambda c: pytest.fail(f"non-standard constant {c}"))


def test_large_stages_are_not_inlined(tmp_path):
    n = int(INLINE_LIMIT**0.5) + 1
    data = json.loads(write_record(make_record(n), tmp_path).read_text())
    assert data["format_version"] == 3
    assert data["stages"]["weights"] == {"shape": [n, n], "values": None,
                                         "canonical_axes": ["batch", "heads", "query", "key"],
                                         "canonical_shape": [1, 1, n, n]}
    small = json.loads(write_record(make_record(3), tmp_path).read_text())
    assert np.asarray(small["stages"]["weights"]["values"]).shape == (3, 3)  # inlined below the limit


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
    with pytest.raises(RecordError, match="no 'variant' field"):
        read_record(path)


def test_matrix_picks_one_batch_item_and_head():
    values = np.arange(2 * 3 * 4 * 4, dtype=np.float32).reshape(2, 3, 4, 4)  # (batch, heads, query, key)
    output = np.arange(2 * 4 * 5, dtype=np.float32).reshape(2, 4, 5)  # (batch, tokens, width)
    record = Record(variant=Side("v", {"weights": values, "output": output}), seed=0, config={},
                    reference=Side("reference", {"weights": values + 1}))
    np.testing.assert_array_equal(record.variant.matrix("weights"), values[0, 0])
    np.testing.assert_array_equal(record.variant.matrix("weights", batch=1, head=2), values[1, 2])
    np.testing.assert_array_equal(record.reference.matrix("weights", batch=1, head=2), values[1, 2] + 1)
    np.testing.assert_array_equal(record.variant.matrix("output", batch=1), output[1])
    assert record.variant.matrix("context") is None and record.variant.num_heads == 3


def test_a_format_1_record_loads_in_its_own_rank_with_output_as_context(tmp_path):
    """Records written before format 2: 2-D single-head stages, no output stage (it was the context)."""
    weights = [[0.25, 0.75], [0.5, 0.5]]
    context = [[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]]
    old = {"variant": "unscaled", "seed": 1, "status": "ok", "config": {}, "n_tokens": 2, "d_in": 3, "d_out": 3,
           "stages": {"weights": {"shape": [2, 2], "values": weights}, "context": {"shape": [2, 3], "values": context}},
           "diagnostics": {"divergence_context": 0.25, "shape_ok_context": 1.0}}
    path = tmp_path / "record.json"
    path.write_text(json.dumps(old))
    record = read_record(path)
    assert record.variant.stages["weights"].shape == (2, 2) and record.variant.stages["context"].shape == (2, 3)
    assert record.variant.canonical("weights").shape == (1, 1, 2, 2) and record.variant.canonical("context").shape == (1, 1, 2, 3)
    assert record.variant.stages["output"].shape == (2, 3) and record.variant.canonical("output").shape == (1, 2, 3)
    np.testing.assert_array_equal(record.variant.matrix("weights"), weights)
    np.testing.assert_array_equal(record.variant.matrix("output"), context)
    assert record.variant.shapes["output"] == [2, 3] and record.output_is_context
    assert record.variant.diagnostics["divergence_output"] == 0.25 and record.variant.diagnostics["shape_ok_output"] == 1.0
    assert record.reference.name == "reference"


def test_a_format_2_record_loads_in_the_module_s_own_rank(tmp_path):
    """Format 2 nested the values in the canonical view and said so in `view_shape`."""
    weights = np.arange(2 * 3 * 3, dtype=np.float32).reshape(2, 3, 3)  # CausalAttention's (batch, query, key)
    old = {"format_version": 2, "variant": "causal_attention", "seed": 1, "config": {}, "status": "ok",
           "stages": {"weights": {"shape": [2, 3, 3], "axes": ["batch", "heads", "query", "key"],
                                  "view_shape": [2, 1, 3, 3], "values": weights[:, None].tolist()},
                      "scores": {"shape": [2, 3, 3], "axes": ["batch", "heads", "query", "key"],
                                 "view_shape": [2, 1, 3, 3], "values": None}}}
    path = tmp_path / "record.json"
    path.write_text(json.dumps(old))
    record = read_record(path)
    np.testing.assert_array_equal(record.variant.stages["weights"], weights)
    assert record.variant.canonical("weights").shape == (2, 1, 3, 3) and record.variant.num_heads == 1
    np.testing.assert_array_equal(record.variant.matrix("weights", batch=1), weights[1])
    assert record.variant.stages["scores"] is None and record.variant.shapes["scores"] == [2, 3, 3]
    again = read_record(write_record(record, tmp_path / "again"))
    np.testing.assert_array_equal(again.variant.stages["weights"], weights)
    assert json.loads(again.path.read_text())["stages"]["weights"]["canonical_shape"] == [2, 1, 3, 3]


def test_values_that_do_not_have_the_shape_the_record_states_are_a_record_error(tmp_path):
    data = to_json_dict(make_record())
    data["stages"]["weights"]["values"] = [[0.5, 0.5]]  # (1, 2), where shape says (3, 3)
    path = tmp_path / "record.json"
    path.write_text(json.dumps(data))
    with pytest.raises(RecordError, match=r"stage weights: values of shape \[1, 2\] where its shape is \[3, 3\]"):
        read_record(path)


@pytest.mark.slow  # every built-in in-process: about 20 s
def test_every_built_in_s_record_values_have_the_shape_it_states(tmp_path):
    """record.json `values` nest as `shape` says, for every stage of every built-in."""
    import attnlab
    from attnlab.plugin_folders import builtin_groups

    for variant in [name for group in builtin_groups() for name in attnlab.list_variants(tag=group)]:
        result = attnlab.run(variant, 123, log={"tensorboard": False, "table": False, "html": False})
        data = json.loads(write_record(result.record, tmp_path / variant).read_text())
        for side in ("stages", "reference_stages"):
            for stage, entry in data[side].items():
                assert entry["values"] is not None, (variant, side, stage)
                assert list(np.asarray(entry["values"]).shape) == entry["shape"], (variant, side, stage)
        for stage, values in result.stages.items():
            assert list(values.shape) == result.record.variant.shapes[stage], (variant, stage)


def test_a_record_is_not_changed_after_it_is_built():
    record = make_record()
    with pytest.raises(dataclasses.FrozenInstanceError):
        record.status = "failed"
    with pytest.raises(dataclasses.FrozenInstanceError):
        record.findings[0].severity = "info"
    assert record.status == "ok" and record.findings[0].severity == "error"


def test_letting_stages_go_makes_a_new_record_and_leaves_the_old_one_whole(tmp_path):
    record = make_record()
    kept = keeping_stages(record, ("weights",))
    dropped = without_stages(kept)
    assert isinstance(kept.variant.stages["weights"], np.memmap) and not isinstance(record.variant.stages["weights"], np.memmap)
    np.testing.assert_array_equal(kept.variant.stages["weights"], record.variant.stages["weights"])
    assert dropped.variant.stages == {"weights": None} and dropped.variant.shapes == record.variant.shapes
    assert dropped.scratch is None and kept.scratch is not None and record.scratch is None


def test_a_written_record_knows_its_path_and_the_one_it_was_made_from_does_not(tmp_path):
    record = make_record()
    done = written(record, tmp_path)
    assert done.path == tmp_path / "record.json" and record.path is None
    assert read_record(done.path).variant.name == record.variant.name
