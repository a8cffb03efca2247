"""A training run's files and text, for the sinks (`write_training`) and the end of a sweep of
training jobs (`write_training_sweep`): training.json, written first by `write_training_run`, so a
failing sink loses nothing; the table sink's training_comparison.md/.csv, the terminal's verdict
and table, the MLflow runs; the TensorBoard runs are attnlab.sinks.training_tensorboard's."""

from __future__ import annotations

import csv
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from attnlab.sinks.base import JobInfo
from attnlab.training.job import TrainingResult
from attnlab.training.lr_grid import grid_markdown
from attnlab.training.sweep_table import TrainingSweep

RESULT_FILE = "training.json"


def write_training_run(sinks: Mapping[str, Any], result: TrainingResult, job: JobInfo) -> None:
    """training.json, then every sink's `write_training` in the sinks' order (the terminal last)."""
    (Path(job.dir) / RESULT_FILE).write_text(json.dumps(result.as_dict(), indent=1))
    for sink in sinks.values():
        if hasattr(sink, "write_training"):
            sink.write_training(result, job)


def write_training_sweep(sinks: Mapping[str, Any], sweep: TrainingSweep, folder: Path) -> None:
    """Every sink's `write_training_sweep`: the sweep's pooled tables and verdicts."""
    for sink in sinks.values():
        if hasattr(sink, "write_training_sweep"):
            sink.write_training_sweep(sweep, folder)


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


def write_sweep_table(sweep: TrainingSweep, folder: Path) -> None:
    """The sweep's training_comparison.md and .csv: every group's table and verdict."""
    (Path(folder) / "training_comparison.md").write_text(sweep.text)
    with open(Path(folder) / "training_comparison.csv", "w", newline="") as file:
        writer = csv.DictWriter(file, fieldnames=list(sweep.rows[0]))
        writer.writeheader()
        writer.writerows(sweep.rows)
