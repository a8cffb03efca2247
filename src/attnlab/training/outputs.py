"""A training job's files, each switched by its sink's `log.NAME`: training.json always (written
first, so a failing output loses nothing); `table`: training_comparison.md/.csv; `tensorboard`:
a run per side and seed (`TASK/VARIANT/seed=N`) with scalars at the training step and the heads'
heatmaps, a pooled run of every side's mean ± std band (Custom Scalars margin charts) and an
HParams session per side (attnlab.training.tensorboard_layout; in a sweep, its end writes those); `html`: training.html; `mlflow`: metrics with steps;
`terminal`: the verdict and the table."""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

from attnlab.sinks.base import SinkSettings
from attnlab.training import tensorboard_layout
from attnlab.training.job import SIDES, TrainingResult
from attnlab.training.lr_grid import grid_markdown
from attnlab.training.page import page_html

RESULT_FILE = "training.json"


def write_outputs(result: TrainingResult, sinks: SinkSettings, job_dir: Path | None, sweep_dir: Path | None = None) -> None:
    log = sinks.log
    if job_dir is not None:
        data = result.as_dict()
        (job_dir / RESULT_FILE).write_text(json.dumps(data, indent=1))
        if log.get("table"):
            write_table(data, job_dir)
        if log.get("tensorboard"):
            in_sweep = sweep_dir is not None
            write_tensorboard(data, (sweep_dir if in_sweep else job_dir) / "tensorboard",
                              tensorboard_layout.swept_keys(sweep_dir) if in_sweep else (), pooled=not in_sweep,
                              seeds=result.seeds if log.get("images") else None)
        if log.get("html"):
            (job_dir / "training.html").write_text(page_html(data))
        if log.get("mlflow"):
            write_mlflow(data, sinks.configs["mlflow"].get("tracking_uri"), job_dir)
    if log.get("terminal"):
        print(terminal_text(result.as_dict()))


def side_label(data: dict[str, Any], side: str) -> str:
    return "reference" if side == "reference" else f"variant={data['variant']}"


def step_scalars(side: dict[str, Any]) -> dict[int, dict[str, float]]:
    """{training step: {tag: value}}: the loss at every step, the evaluations at their cadence, the
    measures at init and at the end."""
    steps: dict[int, dict[str, float]] = {}
    for step, loss in enumerate(side["losses"], start=1):
        steps.setdefault(step, {})["train/loss"] = loss
    for point in side["evals"]:
        steps.setdefault(point["step"], {}).update({f"eval/{k}": v for k, v in point.items() if k != "step"})
    for point in side.get("heads", []):
        steps.setdefault(point["step"], {}).update({f"heads/{k}": v for k, v in point.items() if k != "step"})
    for step, measured in side["measures"].items():
        scalars = {f"attention/{k}": v for k, v in measured["attention"].items()}
        scalars |= {f"grad_norm/{k}": v for k, v in measured["grad_norm"].items()}
        steps.setdefault(int(step), {}).update(scalars)
    return steps


def write_tensorboard(data: dict[str, Any], base: Path, swept: tuple[str, ...] = (), pooled: bool = True,
                      seeds: list[dict[str, Any]] | None = None) -> None:
    """The job's runs under `base` (attnlab.training.tensorboard_layout); `pooled`: its own bands and
    HParams sessions too (a sweep's jobs leave them to the sweep's end); `seeds`: the result's seeds
    with their weights, drawn as heatmaps."""
    label = tensorboard_layout.task_label(data["settings"], swept)
    scalars = [{side: step_scalars(run[side]) for side in SIDES} for run in data["seeds"]]
    tensorboard_layout.write_seed_runs(data, base, label, scalars, seeds)
    if pooled:
        names = {side: f"{label}/{tensorboard_layout.side_name(data, side)}" for side in SIDES}
        tensorboard_layout.write_pooled(base, {names[side]: [s[side] for s in scalars] for side in SIDES})
        for side in SIDES:
            tensorboard_layout.write_session(base, names[side], session_hparams(data, side, len(scalars)),
                                             tensorboard_layout.session_figures([run[side]["summary"] for run in data["seeds"]]),
                                             data["settings"]["steps"])


def session_hparams(data: dict[str, Any], side: str, n_seeds: int) -> dict[str, str | int]:
    return {"side": side, "variant": data["variant"] if side == "variant" else "reference",
            "task": data["settings"]["task"], "seeds": n_seeds,
            "verdict": " ".join(data["verdict"]) if side == "variant" else "the reference"}


def write_table(data: dict[str, Any], job_dir: Path) -> None:
    (job_dir / "training_comparison.md").write_text(table_markdown(data))
    with open(job_dir / "training_comparison.csv", "w", newline="") as file:
        writer = csv.DictWriter(file, fieldnames=list(data["table"][0]))
        writer.writeheader()
        writer.writerows(data["table"])


def table_markdown(data: dict[str, Any]) -> str:
    n = len(data["seeds"])
    lines = [f"| measure | reference | {data['variant']} | clear of seed noise ({n} seed{'s' * (n > 1)}) |",
             "|---|---|---|---|"]
    lines += [f"| {row['what']} | {row['reference']} | {row['variant']} | {row['noise']} |"
              for row in data["table"]]
    return "\n".join(lines) + "\n" + ("\n" + grid_markdown(data["seeds"], data["variant"]) if "grid" in data["seeds"][0] else "")


def terminal_text(data: dict[str, Any]) -> str:
    verdict = "\n".join(f"- {sentence}" for sentence in data["verdict"])
    return (f"training {data['settings']['task']}: {data['variant']} ({data['classes']['variant']}) against "
            f"{data['classes']['reference']}\n{verdict}\n\n{table_markdown(data)}")


def write_mlflow(data: dict[str, Any], tracking_uri: str | None, job_dir: Path) -> None:
    """One MLflow run per side and seed, every scalar at its training step."""
    from mlflow.entities import Metric

    from attnlab.sinks.base import JobInfo
    from attnlab.sinks.mlflow import MlflowSink

    sink = MlflowSink(tracking_uri, images=False)
    client = sink.client()
    experiment_id = sink.experiment_id(client, JobInfo(job_dir))
    for run in data["seeds"]:
        for side in SIDES:
            mlflow_run = client.create_run(experiment_id, run_name=f"{side_label(data, side)} seed={run['seed']}")
            metrics = [Metric(tag.replace("/", "."), value, 0, step)
                       for step, values in step_scalars(run[side]).items() for tag, value in values.items()]
            for start in range(0, len(metrics), 1000):  # MLflow's limit per log_batch call
                client.log_batch(mlflow_run.info.run_id, metrics=metrics[start:start + 1000])
            client.set_tag(mlflow_run.info.run_id, "attnlab.verdict", " ".join(data["verdict"])[:5000])
            client.set_terminated(mlflow_run.info.run_id)
