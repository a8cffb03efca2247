"""Records written before the record became a package still load, field for field."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from attnlab.record import RecordError, read_record, to_json_dict

FIXTURES = Path(__file__).parent / "fixtures"
# written by attnlab.run at format 3: a single run, a variant in a model's layer, the learner's check (the
# model runs' stage values stored as null, as a large stage is)
WRITTEN = ("format3_single.json", "format3_model_layer.json", "format3_model_check.json")


# fields added since those files were written, each with the value a record without it loads with
ADDED_SINCE = {"notes": []}


@pytest.mark.parametrize("name", WRITTEN)
def test_a_record_written_at_format_3_writes_back_byte_for_byte(name: str) -> None:
    text = (FIXTURES / name).read_text()
    written = to_json_dict(read_record(FIXTURES / name))
    added = {key: written.pop(key) for key in list(written) if key not in json.loads(text)}
    assert added == ADDED_SINCE
    assert json.dumps(written, allow_nan=False) == text


def test_a_model_run_s_fields_load_typed() -> None:
    data = json.loads((FIXTURES / "format3_model_check.json").read_text())["model"]
    model = read_record(FIXTURES / "format3_model_check.json").model
    assert (model.layer, model.attention, model.reference_attention) == (1, "trf_blocks.1.att", "transformer.h.1.attn")
    assert model.effect is None and model.end_to_end.kl_mean == data["end_to_end"]["kl_mean"]
    layer = read_record(FIXTURES / "format3_model_layer.json").model
    assert layer.end_to_end is None and layer.reference_model is None and layer.effect.top1_agreement == 1.0
    assert read_record(FIXTURES / "format3_single.json").model is None


def test_an_effect_from_before_clamping_loads_with_nothing_clamped(tmp_path: Path) -> None:
    """Effects written before `kl_clamped` and `non_finite_positions` existed; a NaN loss spelled "nan"."""
    data = json.loads((FIXTURES / "format3_model_layer.json").read_text())
    for key in ("kl_clamped", "non_finite_positions"):
        del data["model"]["effect"][key]
    data["model"]["effect"]["loss"] = "nan"
    (tmp_path / "record.json").write_text(json.dumps(data))
    effect = read_record(tmp_path / "record.json").model.effect
    assert effect.kl_clamped == 0.0 and effect.non_finite_positions == 0 and math.isnan(effect.loss)


def test_a_model_field_that_is_not_an_object_is_a_record_error(tmp_path: Path) -> None:
    data = json.loads((FIXTURES / "format3_single.json").read_text())
    data["model"] = [1]
    (tmp_path / "record.json").write_text(json.dumps(data))
    with pytest.raises(RecordError, match="'model' is list"):
        read_record(tmp_path / "record.json")


def test_an_encoder_decoder_s_stack_and_a_classifier_s_positions_load_back(tmp_path: Path) -> None:
    """A record from before `stack`, `replaced` and `positions` loads with none (one stack, every token)."""
    data = json.loads((FIXTURES / "format3_model_layer.json").read_text())
    assert read_record(FIXTURES / "format3_model_layer.json").model.layer_name == str(data["model"]["layer"])
    data["model"].update(stack="decoder", replaced="decoder self-attention", positions=1)
    (tmp_path / "record.json").write_text(json.dumps(data))
    model = read_record(tmp_path / "record.json").model
    assert (model.stack, model.replaced, model.positions) == ("decoder", "decoder self-attention", 1)
    assert model.layer_name == f"decoder.{data['model']['layer']}"
    assert to_json_dict(read_record(tmp_path / "record.json"))["model"]["stack"] == "decoder"
