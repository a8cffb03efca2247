"""TensorBoard's HParams over a sweep: the swept keys are the columns, the same in every job."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from attnlab.sinks.tensorboard import VERDICT

pytestmark = pytest.mark.slow


def hparams_events(job_dir: Path) -> tuple:
    """(experiment, session start info) as written in the job's event file."""
    from tensorboard.backend.event_processing.event_file_loader import EventFileLoader
    from tensorboard.plugins.hparams import metadata

    experiment = start = None
    for path in job_dir.glob("events.out.tfevents.*"):
        for event in EventFileLoader(str(path)).Load():
            for value in event.summary.value:
                content = value.metadata.plugin_data.content
                if value.tag == metadata.EXPERIMENT_TAG:
                    experiment = metadata.parse_experiment_plugin_data(content)
                elif value.tag == metadata.SESSION_START_INFO_TAG:
                    start = metadata.parse_session_start_info_plugin_data(content)
    return experiment, start


def test_a_sweep_has_a_session_per_run_its_swept_keys_first(app, tmp_path) -> None:
    """The jobs of a sweep share a TensorBoard run per configuration (here: per variant, the seeds
    its jobs); its HParams session is written when the sweep ends, with the values the jobs share
    and their verdicts."""
    sweep = tmp_path / "sweep"
    result = app("-m", f"hydra.sweep.dir={sweep}", "variant=reference,softcap,sliding_window", "seed=1,2",
                 "d_out=4", "log.terminal=false", "log.images=false", "log.histograms=false")
    assert result.returncode == 0, result.stderr
    runs = sorted(p.parent for p in sweep.glob("*/events.out.tfevents.*.sessions"))
    assert [run.name for run in runs] == ["reference", "sliding_window", "softcap"]
    for run in runs:
        experiment, start = hparams_events(run)
        assert [info.name for info in experiment.hparam_infos if info.differs] == ["variant", *VERDICT]
        names = {info.name for info in experiment.hparam_infos}
        assert {"d_out", "num_kv_heads", "findings", "first_divergent_stage"} <= names  # every key declared
        assert not any(name.endswith(("_target_", "_convert_")) for name in names)
        assert start.group_name == f"sweep {run.name}"
        assert start.hparams["d_out"].number_value == 4 and "inputs.kind" in start.hparams
        assert "seed" not in start.hparams  # its two jobs differ in it: not a value of the run
        assert len(list(run.glob("events.out.tfevents.*"))) == 3  # two jobs and the sessions
    _, softcap = hparams_events(sweep / "softcap")
    records = [json.loads(p.read_text()) for p in sorted(sweep.glob("*variant=softcap*/record.json"))]
    codes = [" ".join(f["code"] for f in record["findings"]) for record in records]
    assert len(codes) == 2 and softcap.hparams["findings"].string_value == " / ".join(dict.fromkeys(codes))
    assert softcap.hparams["variant.params.cap"].number_value > 0


def test_a_swept_variant_param_names_the_run_and_its_session(app, tmp_path) -> None:
    sweep = tmp_path / "sweep"
    result = app("-m", f"hydra.sweep.dir={sweep}", "variant=sliding_window", "variant.params.window=2,3",
                 "log.terminal=false", "log.images=false", "log.histograms=false", "log.html=false")
    assert result.returncode == 0, result.stderr
    for window in (2, 3):
        experiment, start = hparams_events(sweep / f"sliding_window,variant.params.window={window}")
        assert [info.name for info in experiment.hparam_infos if info.differs] == ["variant.params.window", *VERDICT]
        assert int(start.hparams["variant.params.window"].number_value) == window
        assert start.group_name == f"sweep sliding_window variant.params.window={window}"


def test_a_single_run_keeps_every_hparam_but_hydra_internals(app) -> None:
    result = app("variant=unscaled", "log.terminal=false", "log.images=false", "log.histograms=false")
    assert result.returncode == 0, result.stderr
    experiment, start = hparams_events(result.out_dir)
    names = {info.name for info in experiment.hparam_infos}
    assert {"variant", "seed", "d_out", "inputs.kind", "findings", "first_divergent_stage"} <= names
    assert not any(name.endswith(("_target_", "_convert_")) for name in names)
    assert start.hparams["findings"].string_value == "scaling"
    assert start.hparams["first_divergent_stage"].string_value == "scaled_scores"
