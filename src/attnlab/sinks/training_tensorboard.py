"""Training's TensorBoard runs, laid out for `tensorboard --logdir runs`.

Under one folder (a sweep's `<sweep>/tensorboard`, a single job's `<job>/tensorboard`):
- `TASK/VARIANT/seed=N` and `TASK/reference/seed=N`: one run per side and seed, every scalar at its
  training step and the heads' heatmaps at the evaluations (the step slider). TASK is the task and
  the training settings the sweep varies (`induction,model.d_model=16`); a reference is written once
  per (task, seed, settings), by the job that trained it, never by the jobs that loaded it.
- `pooled`: one run for the whole sweep holding every side's mean and mean ± std over the seeds
  (`TASK/VARIANT/train/loss/{mean,lower,upper}`) and a Custom Scalars margin chart per measure and
  side, so the bands need one run selected whatever the number of jobs.
- `TASK/VARIANT` (the seeds' parent): its HParams session, the pooled figures as its metrics.

`write_job` writes a job's runs (the tensorboard sink's `write_training`); a sweep's jobs leave the
pooled run and the sessions to `write_sweep_bands`, at the sweep's end (`write_training_sweep`).
"""

from __future__ import annotations

import shutil
import statistics
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from attnlab.sinks.tensorboard_format import EventFile, custom_scalars, hparams_summaries, scalars_summary
from attnlab.sinks.tensorboard_runs import run_folder_name
from attnlab.sinks.training_files import step_scalars
from attnlab.training.head_probes import HEAD_WEIGHTS
from attnlab.training.job import SIDES
from attnlab.training.measures import PROBE_WEIGHTS
from attnlab.training.sweep_table import TrainingSweep

POOLED_RUN = "pooled"
BANDED = ("train/loss", "eval/causal_accuracy", "eval/teacher_forced_accuracy", "heads/induction_max")
MOST_HEATMAPS = 10  # checkpoints drawn per run: rendering every evaluation of a long run costs more than it shows

StepScalars = dict[int, dict[str, float]]


def flat_settings(settings: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    flat: dict[str, Any] = {}
    for key, value in settings.items():
        flat |= flat_settings(value, f"{prefix}{key}.") if isinstance(value, Mapping) else {f"{prefix}{key}": value}
    return flat


def task_label(settings: Mapping[str, Any], swept: Iterable[str] = ()) -> str:
    """The task and the swept training settings' values: `induction` or `induction,model.d_model=16`."""
    flat = flat_settings(settings)
    keys = [key.removeprefix("training.") for key in swept if key.startswith("training.")]
    return run_folder_name(",".join([str(settings["task"]), *(f"{k}={flat[k]}" for k in keys if k in flat and k != "task")]))


def swept_keys(sweep_dir: Path) -> tuple[str, ...]:
    """The hyperparameters the sweep varies (multirun.yaml), of which TASK names the training ones."""
    from attnlab.reporting.multirun import swept_values

    return tuple(swept_values(sweep_dir))


def side_name(data: Mapping[str, Any], side: str) -> str:
    return "reference" if side == "reference" else run_folder_name(str(data["variant"]))


def write_seed_runs(data: Mapping[str, Any], base: Path, label: str, scalars: Sequence[Mapping[str, StepScalars]],
                    seeds: Sequence[Mapping[str, Any]] | None) -> None:
    """`scalars`: per seed {side: step scalars}; `seeds`: the result's seeds with their weights (None: no images)."""
    for index, run in enumerate(data["seeds"]):
        for side in ("reference", "variant"):
            if run[side].get("from_cache"):  # the job that trained it wrote its run
                continue
            folder = base / label / side_name(data, side) / f"seed={run['seed']}"
            shutil.rmtree(folder, ignore_errors=True)  # a job run again replaces its runs
            with EventFile(folder) as events:
                for step, values in sorted(scalars[index][side].items()):
                    events.add(scalars_summary(values), step=step)
                if seeds is not None:
                    _write_heatmaps(events, _checkpoint_weights(seeds[index][side]),
                                    f"{label}/{side_name(data, side)}/seed={run['seed']}")


def _checkpoint_weights(side: Mapping[str, Any]) -> dict[str, dict[int, np.ndarray]]:
    """{step: {layer: (H, T, T)}}: the evaluations' weights (at most MOST_HEATMAPS of them, evenly
    spaced, the first and the last kept), else the probe's at init and at the end."""
    if side.get(HEAD_WEIGHTS):
        steps = list(side[HEAD_WEIGHTS])
        n = min(len(steps), MOST_HEATMAPS)
        kept = sorted({steps[round(i * (len(steps) - 1) / max(1, n - 1))] for i in range(n)}, key=int)
        return {step: side[HEAD_WEIGHTS][step] for step in kept}
    return {step: measured[PROBE_WEIGHTS] for step, measured in side["measures"].items()}


def _write_heatmaps(events: EventFile, weights: Mapping[str, Mapping[int, np.ndarray]], label: str) -> None:
    """Each layer's attention weights on the first evaluation item, every head, at each checkpoint."""
    from attnlab.reporting.heatmap import render_head_grid
    from attnlab.reporting.job_heatmaps import encoded
    from attnlab.sinks.tensorboard_format import image_summary

    for step, layers in weights.items():
        for layer, item in layers.items():
            item = np.asarray(item, dtype=np.float32)  # (H, T, T)
            title = f"{label}: layer {layer} attention weights, step {step}"
            image = encoded(lambda: render_head_grid(item, title=title, value_range=(0.0, 1.0), axes=("query", "key")),
                            item, title)
            events.add(image_summary(f"heatmaps/layer{layer}", image), step=int(step))


def band(per_seed: Sequence[StepScalars], step: int, tag: str) -> tuple[float, float, float] | None:
    """(mean, mean - std, mean + std) over the seeds that have `tag` at `step`."""
    seen = [s[step][tag] for s in per_seed if tag in s.get(step, {})]
    if not seen:
        return None
    mean = statistics.fmean(seen)
    std = statistics.stdev(seen) if len(seen) > 1 else 0.0
    return mean, mean - std, mean + std


def write_pooled(base: Path, sides: Mapping[str, Sequence[StepScalars]]) -> None:
    """The `pooled` run: `sides` maps "TASK/SIDE" to its seeds' step scalars; per BANDED measure a
    Custom Scalars category with a margin chart (mean, lower, upper) per side."""
    folder = base / POOLED_RUN
    sides = dict(sorted(sides.items(), key=lambda item: (item[0].rpartition("/")[0], item[0].rpartition("/")[2] != "reference",
                                                         item[0])))  # each TASK's reference first, then its variants
    shutil.rmtree(folder, ignore_errors=True)  # the sweep's end run again: its pooled run replaced
    steps = sorted({step for per_seed in sides.values() for s in per_seed for step in s})
    present = [tag for tag in BANDED if any(tag in values for per_seed in sides.values() for s in per_seed
                                            for values in s.values())]
    # TensorBoard 2.21's Custom Scalars lays a category's charts out last first: written reversed, shown in order
    layout = {f"{tag} (mean; band: mean ± std over seeds)": {
        name: ["Margin", [f"{name}/{tag}/mean", f"{name}/{tag}/lower", f"{name}/{tag}/upper"]] for name in reversed(sides)}
        for tag in present}
    with EventFile(folder) as events:
        for step in steps:
            values: dict[str, float] = {}
            for name, per_seed in sides.items():
                for tag in present:
                    found = band(per_seed, step, tag)
                    if found is not None:
                        values |= dict(zip((f"{name}/{tag}/mean", f"{name}/{tag}/lower", f"{name}/{tag}/upper"), found))
            if values:
                events.add(scalars_summary(values), step=step)
        events.add(custom_scalars(layout))


def write_session(base: Path, name: str, hparams: Mapping[str, str | int], figures: Mapping[str, float], step: int) -> None:
    """The HParams session of one side ("TASK/SIDE"), its pooled figures as metrics `pooled/<measure>`,
    in the folder above its seeds' runs (their own event files left alone)."""
    folder = base / name
    for old in folder.glob("events.out.tfevents.*"):
        old.unlink()
    metrics = {f"pooled/{measure}": value for measure, value in figures.items()}
    with EventFile(folder) as events:
        events.add(scalars_summary(metrics), step=step)
        for summary in hparams_summaries(hparams, list(metrics), ok=True, swept=["variant"], trial=name):
            events.add(summary)


def session_figures(summaries: Sequence[Mapping[str, Any]]) -> dict[str, float]:
    """{measure: its mean over the seeds' summaries}, for the measures every seed has a number of
    (a measure that does not apply is under the summary's not_measured, with why)."""
    return {key: statistics.fmean(s[key] for s in summaries) for key in summaries[0]
            if all(isinstance(s.get(key), int | float) for s in summaries)}


def write_job(data: dict[str, Any], base: Path, swept: tuple[str, ...] = (), pooled: bool = True,
              seeds: list[dict[str, Any]] | None = None) -> None:
    """The job's runs under `base` (the module's docstring); `pooled`: its own bands and
    HParams sessions too (a sweep's jobs leave them to the sweep's end); `seeds`: the result's seeds
    with their weights, drawn as heatmaps."""
    label = task_label(data["settings"], swept)
    scalars = [{side: step_scalars(run[side]) for side in SIDES} for run in data["seeds"]]
    write_seed_runs(data, base, label, scalars, seeds)
    if pooled:
        names = {side: f"{label}/{side_name(data, side)}" for side in SIDES}
        write_pooled(base, {names[side]: [s[side] for s in scalars] for side in SIDES})
        for side in SIDES:
            write_session(base, names[side], session_hparams(data, side, len(scalars)),
                          session_figures([run[side]["summary"] for run in data["seeds"]]), data["settings"]["steps"])


def session_hparams(data: dict[str, Any], side: str, n_seeds: int) -> dict[str, str | int]:
    return {"side": side, "variant": data["variant"] if side == "variant" else "reference",
            "task": data["settings"]["task"], "seeds": n_seeds,
            "verdict": " ".join(data["verdict"]) if side == "variant" else "the reference"}


def write_sweep_bands(folder: Path, sweep: TrainingSweep) -> None:
    """The sweep's pooled run (each variant's band over all its jobs' seeds, each TASK's reference once,
    pooled over every seed any job trained it for) and an HParams session per side."""
    base, swept = folder / "tensorboard", swept_keys(folder)
    sides: dict[str, list[dict[int, dict[str, float]]]] = {}
    references: dict[str, tuple[dict[str, Any], dict[int, dict[str, Any]]]] = {}  # TASK: (settings, {seed: side})
    for label, results in sweep.grouped.items():
        data = {"variant": results[0]["variant"], "settings": results[0]["settings"], "verdict": sweep.verdicts[label]}
        task = task_label(data["settings"], swept)
        name = f"{task}/{side_name(data, 'variant')}"
        runs = [run for r in results for run in r["seeds"]]
        sides[name] = [step_scalars(run["variant"]) for run in runs]
        references.setdefault(task, (data["settings"], {}))[1].update({run["seed"]: run["reference"] for run in runs})
        figures = session_figures([run["variant"]["summary"] for run in runs])
        write_session(base, name, session_hparams(data, "variant", len(runs)), figures, data["settings"]["steps"])
    for task, (settings, by_seed) in references.items():
        sides[f"{task}/reference"] = [step_scalars(side) for _, side in sorted(by_seed.items())]
        data = {"variant": "reference", "settings": settings, "verdict": []}
        figures = session_figures([side["summary"] for side in by_seed.values()])
        write_session(base, f"{task}/reference", session_hparams(data, "reference", len(by_seed)),
                      figures, settings["steps"])
    write_pooled(base, sides)
