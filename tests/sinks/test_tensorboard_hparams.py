"""TensorBoard's HParams over a sweep: the swept keys are the columns, the same in every job."""

from __future__ import annotations

from pathlib import Path

import pytest

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


def test_every_job_of_a_sweep_shows_the_swept_keys_first_and_the_same_columns(app, tmp_path) -> None:
    sweep = tmp_path / "sweep"
    result = app("-m", f"hydra.sweep.dir={sweep}", "variant=reference,softcap,sliding_window", "seed=1,2",
                 "d_out=4", "log.terminal=false", "log.images=false", "log.histograms=false")
    assert result.returncode == 0, result.stderr
    jobs = sorted((p.parent for p in sweep.glob("*/record.json")), key=lambda job: int(job.name.split("-")[0]))
    assert len(jobs) == 6
    experiments, trials = [], []
    for job in jobs:
        experiment, start = hparams_events(job)
        experiments.append(experiment)
        trials.append(start.group_name)
        assert [info.name for info in experiment.hparam_infos if info.differs] == ["variant", "seed"]
        names = {info.name for info in experiment.hparam_infos}
        assert {"d_out", "num_kv_heads", "findings", "first_divergent_stage"} <= names  # every key declared
        assert not any(name.endswith(("_target_", "_convert_")) for name in names)
        assert start.hparams["d_out"].number_value == 4 and "inputs.kind" in start.hparams
    assert trials == sorted(trials)  # the trial names sort in job order
    assert trials[0] == "sweep #000 reference s1" and trials[2] == "sweep #002 softcap s1"
    params = {key for job in jobs for key in hparams_events(job)[1].hparams if key.startswith("variant.params.")}
    assert params == {"variant.params.cap", "variant.params.window"}  # differ by variant, not columns


def test_a_swept_variant_param_is_a_column_and_names_the_trial(app, tmp_path) -> None:
    sweep = tmp_path / "sweep"
    result = app("-m", f"hydra.sweep.dir={sweep}", "variant=sliding_window", "variant.params.window=2,3",
                 "log.terminal=false", "log.images=false", "log.histograms=false", "log.html=false")
    assert result.returncode == 0, result.stderr
    for job in sorted(p.parent for p in sweep.glob("*/record.json")):
        experiment, start = hparams_events(job)
        assert [info.name for info in experiment.hparam_infos if info.differs] == ["variant.params.window"]
        window = int(start.hparams["variant.params.window"].number_value)
        assert start.group_name.endswith(f"sliding_window variant.params.window={window} s123")


def test_a_single_run_keeps_every_hparam_but_hydra_internals(app) -> None:
    result = app("variant=unscaled", "log.terminal=false", "log.images=false", "log.histograms=false")
    assert result.returncode == 0, result.stderr
    experiment, start = hparams_events(result.out_dir)
    names = {info.name for info in experiment.hparam_infos}
    assert {"variant", "seed", "d_out", "inputs.kind", "findings", "first_divergent_stage"} <= names
    assert not any(name.endswith(("_target_", "_convert_")) for name in names)
    assert start.hparams["findings"].string_value == "scaling"
    assert start.hparams["first_divergent_stage"].string_value == "scaled_scores"
