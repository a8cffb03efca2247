"""n_seeds jobs: each seed's record equals its single run; one table, one TensorBoard run, a compact terminal."""

from __future__ import annotations

import csv
import json
import math

import numpy as np
import pytest
import torch

from attnlab.app.api import compose_config
from attnlab.app.job_settings import job_spec
from attnlab.app.run_job import at_own_width, compute_records, write_outputs
from attnlab.compute.pipeline import SINGLE_THREAD_TOKENS, compute_threads
from attnlab.errors import WidthNeeded
from attnlab.record import to_json_dict

RANDOM = ["inputs=random", "inputs.n_tokens=8", "inputs.d_in=4", "d_out=3"]


def _values(record_json: dict) -> dict:
    """Everything a record found; the config differs by n_seeds only and is compared apart."""
    return {k: v for k, v in record_json.items() if k != "config"}


@pytest.mark.parametrize("variant,overrides", [("unscaled", []), ("wrong_softmax_axis", RANDOM), ("linear", RANDOM)])
@pytest.mark.slow
def test_each_seed_equals_its_single_run_bitwise(variant, overrides):
    many = compute_records(compose_config(variant, 7, [*overrides, "n_seeds=4"]))
    assert [r.seed for r in many] == [7, 8, 9, 10]
    for record in many:
        single = compute_records(compose_config(variant, record.seed, overrides))[0]
        assert json.dumps(_values(to_json_dict(record))) == json.dumps(_values(to_json_dict(single)))
        for name, values in single.variant.stages.items():
            assert np.array_equal(record.variant.stages[name], values)  # bitwise, not rounded by JSON
        for name, value in single.variant.diagnostics.items():
            other = record.variant.diagnostics[name]
            assert (math.isnan(value) and math.isnan(other)) or value == other, name
        assert {**record.config, "n_seeds": 1} == single.config


def test_records_do_not_share_their_config():
    a, b = compute_records(compose_config("unscaled", 1, ["n_seeds=2"]))
    a.config["inputs"]["kind"] = "changed"
    assert b.config["inputs"]["kind"] == "book" and (a.seed, b.seed) == (1, 2)


def test_compute_threads_is_one_for_small_inputs_and_restores():
    before = torch.get_num_threads()
    with compute_threads(6):
        assert torch.get_num_threads() == 1
    assert torch.get_num_threads() == before
    with compute_threads(SINGLE_THREAD_TOKENS):
        assert torch.get_num_threads() == before


def test_n_seeds_outputs_layout(tmp_path, capsys):
    cfg = compose_config("unscaled", 3, ["n_seeds=3"])
    records = compute_records(cfg)
    write_outputs(cfg, records, tmp_path)
    for seed in (3, 4, 5):
        assert json.loads((tmp_path / f"seed-{seed}" / "record.json").read_text())["seed"] == seed
        assert not list((tmp_path / f"seed-{seed}").glob("events.out.tfevents*"))  # one run: the job's
        assert not (tmp_path / f"seed-{seed}" / "comparison.csv").exists()
    rows = list(csv.DictReader((tmp_path / "comparison.csv").open()))
    assert [row["seed"] for row in rows] == ["3", "4", "5"]
    assert list(tmp_path.glob("events.out.tfevents*"))
    out = capsys.readouterr().out
    assert "seeds=3..5 (3)" in out and "attention weights" not in out
    assert sum(line.strip().startswith(("3 ", "4 ", "5 ")) for line in out.splitlines()) == 3


def test_n_seeds_tensorboard_scalars_are_at_step_seed(tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    cfg = compose_config("unscaled", 10, ["n_seeds=3", "log.terminal=false"])
    write_outputs(cfg, compute_records(cfg), tmp_path)
    events = EventAccumulator(str(tmp_path), size_guidance={"scalars": 0, "images": 0})
    events.Reload()
    assert [e.step for e in events.Scalars("divergence/context")] == [10, 11, 12]
    assert {e.step for tag in events.Tags()["images"] for e in events.Images(tag)} == {0}


@pytest.mark.slow
def test_cli_n_seeds_rows_equal_single_runs(app):
    many = app("variant=unscaled", "n_seeds=2", "seed=40", out="many")
    assert many.returncode == 0, many.stderr
    single = app("variant=unscaled", "seed=41", out="single")
    assert single.returncode == 0, single.stderr
    rows = {row["seed"]: row for row in csv.DictReader((many.out_dir / "comparison.csv").open())}
    variant_row = next(r for r in csv.DictReader((single.out_dir / "comparison.csv").open()) if r["module"] == "variant")
    same = [k for k in variant_row if k not in ("module", "path")]
    assert {k: rows["41"][k] for k in same} == {k: variant_row[k] for k in same}
    assert _values(json.loads((many.out_dir / "seed-41" / "record.json").read_text())) == _values(single.record)


def test_seeds_stream_each_record_written_in_full_then_only_reductions_kept(tmp_path):
    from attnlab.app.run_job import run_job
    from attnlab.record import read_record

    cfg = compose_config("multi_head_attention", 3, [*RANDOM, "d_out=4", "n_seeds=3", "log.terminal=false"])
    records = run_job(cfg, tmp_path)
    assert isinstance(records[0].variant.stages["weights"], np.memmap)  # the first kept on disk: the sinks draw it
    for record in records[1:]:
        assert all(values is None for values in record.variant.stages.values())
        assert record.variant.shapes["weights"] == [2, 2, 8, 8] and record.variant.diagnostics  # reductions kept
        on_disk = read_record(tmp_path / f"seed-{record.seed}" / "record.json")
        assert on_disk.variant.stages["weights"] is not None and on_disk.variant.stages["weights"].shape == (2, 2, 8, 8)
    assert len(list((tmp_path).glob("seed-*/record.json"))) == 3


def test_a_width_of_the_variant_s_own_runs_the_comparison_there_only_where_the_inputs_width_is_free():
    """Random inputs are given the width (the reference's heads the width its queries make), the
    variant's class keeps the run's sizes; the user's own embeddings, and a second ask, keep the refusal."""
    spec = job_spec(compose_config("unscaled", 1, RANDOM))
    needed = WidthNeeded("X takes inputs of other widths than the run's d_in=4 (q 8 wide): why; inputs 8 wide run it",
                         8, 6)
    given, wider = at_own_width({"_target_": "random", "n_tokens": 8, "d_in": 4}, spec, needed)
    assert given["d_in"] == 8 and (wider.d_out, wider.values["d_out"]) == (6, 6)
    assert wider.variant_sizes == {"d_in": 4, "d_out": 3}
    assert wider.notes[-1].startswith("ran at d_in=8, not inputs.d_in=4, the reference's heads 6 wide in all: X takes")
    for refused in (lambda: at_own_width({"_target_": "text", "text": "a b"}, spec, needed),
                    lambda: at_own_width(given, wider, WidthNeeded("again 16", 16, 16))):
        with pytest.raises(WidthNeeded):
            refused()
