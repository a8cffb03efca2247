"""A training job's files, each switched by its sink's `log.NAME`: training.json always (written
first, so a failing output loses nothing); `table`: training_comparison.md/.csv; `tensorboard`:
a run per side and seed with scalars at the training step and the probe's heatmaps, and per side a
mean ± std band over the seeds (Custom Scalars margin charts) with an HParams session holding the
verdict; `html`: training.html; `mlflow`: metrics with steps;
`terminal`: the verdict and the table."""

from __future__ import annotations

import csv
import json
import statistics
from pathlib import Path
from typing import Any

from omegaconf import DictConfig

from attnlab.sinks.tensorboard_format import EventFile, hparams_summaries, scalars_summary
from attnlab.training.job import SIDES, TrainingResult
from attnlab.training.lr_grid import grid_markdown
from attnlab.training.measures import PROBE_WEIGHTS
from attnlab.training.page import page_html

RESULT_FILE = "training.json"
BANDED = ("train/loss", "eval/causal_accuracy", "eval/teacher_forced_accuracy")  # the margin charts


def write_outputs(result: TrainingResult, cfg: DictConfig, job_dir: Path | None) -> None:
    log = cfg.log
    if job_dir is not None:
        data = result.as_dict()
        (job_dir / RESULT_FILE).write_text(json.dumps(data, indent=1))
        if log.get("table"):
            write_table(data, job_dir)
        if log.get("tensorboard"):
            write_tensorboard(data, job_dir, result.seeds if log.get("images") else None)
        if log.get("html"):
            (job_dir / "training.html").write_text(page_html(data))
        if log.get("mlflow"):
            write_mlflow(data, cfg, job_dir)
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
    for step, measured in side["measures"].items():
        scalars = {f"attention/{k}": v for k, v in measured["attention"].items()}
        scalars |= {f"grad_norm/{k}": v for k, v in measured["grad_norm"].items()}
        steps.setdefault(int(step), {}).update(scalars)
    return steps


def write_tensorboard(data: dict[str, Any], job_dir: Path, images: list[dict[str, Any]] | None = None) -> None:
    """`images`: the result's seeds with their probe weights, drawn as `heatmaps/layer<i>` at init and at the end."""
    for side in SIDES:
        label = side_label(data, side)
        per_seed = [step_scalars(run[side]) for run in data["seeds"]]
        for index, (run, scalars) in enumerate(zip(data["seeds"], per_seed)):
            with EventFile(job_dir / "tensorboard" / f"{label},seed={run['seed']}") as events:
                for step, values in sorted(scalars.items()):
                    events.add(scalars_summary(values), step=step)
                if images is not None:
                    _write_heatmaps(events, images[index][side]["measures"], label)
        write_band(job_dir / "tensorboard" / label, per_seed, label, session_hparams(data, side, len(per_seed)))


def session_hparams(data: dict[str, Any], side: str, n_seeds: int) -> dict[str, str | int]:
    return {"side": side, "variant": data["variant"], "task": data["settings"]["task"], "seeds": n_seeds,
            "verdict": " ".join(data["verdict"])}


def write_band(folder: Path, per_seed: list[dict[int, dict[str, float]]], label: str,
               session: dict[str, str | int]) -> None:
    """A run of the BANDED curves' mean and mean ± std over the seeds at each step, a Custom Scalars
    margin chart per curve, and an HParams session (the verdict among its columns)."""
    from attnlab.sinks.tensorboard_format import custom_scalars

    layout = {"training: mean ± std over seeds": {tag: ["Margin", [f"{tag}/mean", f"{tag}/lower", f"{tag}/upper"]]
                                                 for tag in BANDED}}
    with EventFile(folder) as events:
        for step in sorted(per_seed[0]):
            values: dict[str, float] = {}
            for tag in BANDED:
                seen = [s[step][tag] for s in per_seed if tag in s.get(step, {})]
                if seen:
                    mean, std = statistics.fmean(seen), statistics.stdev(seen) if len(seen) > 1 else 0.0
                    values |= {f"{tag}/mean": mean, f"{tag}/lower": mean - std, f"{tag}/upper": mean + std}
            if values:
                events.add(scalars_summary(values), step=step)
        events.add(custom_scalars(layout))
        for summary in hparams_summaries(session, [f"{tag}/mean" for tag in BANDED], ok=True, swept=["variant"],
                                         trial=label):
            events.add(summary)


def _write_heatmaps(events: EventFile, measures: dict[str, dict[str, Any]], label: str) -> None:
    """Each layer's attention weights on the first probe item, every head, at each checkpoint."""
    from attnlab.reporting.heatmap import render_head_grid
    from attnlab.reporting.job_heatmaps import encoded
    from attnlab.sinks.tensorboard_format import image_summary

    for step, measured in measures.items():
        for layer, weights in measured[PROBE_WEIGHTS].items():
            title = f"{label}: layer {layer} attention weights, step {step}"
            image = encoded(lambda: render_head_grid(weights, title=title, value_range=(0.0, 1.0), axes=("query", "key")),
                            weights, title)
            events.add(image_summary(f"heatmaps/layer{layer}", image), step=int(step))


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


def write_mlflow(data: dict[str, Any], cfg: DictConfig, job_dir: Path) -> None:
    """One MLflow run per side and seed, every scalar at its training step."""
    from mlflow.entities import Metric

    from attnlab.sinks.base import JobInfo
    from attnlab.sinks.mlflow import MlflowSink

    sink = MlflowSink(cfg.sink.mlflow.get("tracking_uri"), images=False)
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
