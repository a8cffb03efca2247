"""A sweep of training jobs pooled: every job's training.json under the sweep folder, grouped by
variant and training settings, each group's seeds (from all its jobs) into one table and verdict,
written as training_comparison.md and .csv in the sweep folder; with `bands`, TensorBoard's
pooled run (each side's mean ± std over all its seeds) and an HParams session per side
(attnlab.training.tensorboard_layout)."""

from __future__ import annotations

import csv
import json
import re
from pathlib import Path
from typing import Any

from attnlab.training import tensorboard_layout
from attnlab.training.lr_grid import grid_markdown
from attnlab.training.outputs import session_hparams, step_scalars
from attnlab.training.verdict import judged

RESULT_FILE = "training.json"


def _flat(settings: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    flat: dict[str, Any] = {}
    for key, value in settings.items():
        flat |= _flat(value, f"{prefix}{key}.") if isinstance(value, dict) else {f"{prefix}{key}": value}
    return flat


def _in_job_order(path: Path) -> list[tuple[int, str]]:
    """Job folders by their numbers (2-... before 10-...): the groups in the sweep's own order, a
    ladder of sizes rung by rung."""
    return [(int(part), "") if part.isdigit() else (-1, part) for part in re.split(r"(\d+)", str(path))]


def groups(folder: Path) -> dict[str, list[dict[str, Any]]]:
    """{label: the jobs' results}: a label is the variant and the settings that vary across the sweep."""
    results = [json.loads(path.read_text()) for path in sorted(folder.rglob(RESULT_FILE), key=_in_job_order)]
    flats = [_flat(r["settings"]) for r in results]
    varying = sorted({k for f in flats for k in f if len({json.dumps(g.get(k)) for g in flats}) > 1})
    grouped: dict[str, list[dict[str, Any]]] = {}
    for result, flat in zip(results, flats):
        label = " ".join([result["variant"], *(f"training.{k}={flat[k]}" for k in varying)])
        grouped.setdefault(label, []).append(result)
    return grouped


def write_sweep_training(folder: Path, bands: bool = False) -> str | None:
    """The pooled tables and verdicts (None: the sweep trained nothing); returns the markdown."""
    grouped = groups(Path(folder))
    if not grouped:
        return None
    sections, table_rows, verdicts = [], [], {}
    for label, results in grouped.items():
        runs = sorted((run for r in results for run in r["seeds"]), key=lambda run: run["seed"])
        settings = results[0]["settings"]
        table, said = judged(results[0]["variant"], runs, settings)
        verdicts[label] = said
        lines = [f"## {label} ({len(runs)} seeds)", "", *(f"- {s}" for s in said), "",
                 "| measure | reference | variant | clear of seed noise |", "|---|---|---|---|"]
        for row in (row.as_dict() for row in table):
            lines.append(f"| {row['what']} | {row['reference']} | {row['variant']} | {row['noise']} |")
            table_rows.append({"group": label, **row})
        sections.append("\n".join(lines) + ("\n\n" + grid_markdown(runs, "variant") if "grid" in runs[0] else ""))
    if bands:
        _write_tensorboard(Path(folder), grouped, verdicts)
    text = "\n\n".join(sections) + "\n"
    (Path(folder) / "training_comparison.md").write_text(text)
    with open(Path(folder) / "training_comparison.csv", "w", newline="") as file:
        writer = csv.DictWriter(file, fieldnames=list(table_rows[0]))
        writer.writeheader()
        writer.writerows(table_rows)
    return text


def _write_tensorboard(folder: Path, grouped: dict[str, list[dict[str, Any]]], verdicts: dict[str, list[str]]) -> None:
    """The sweep's pooled run (each variant's band over all its jobs' seeds, each TASK's reference once,
    pooled over every seed any job trained it for) and an HParams session per side."""
    base, swept = folder / "tensorboard", tensorboard_layout.swept_keys(folder)
    sides: dict[str, list[dict[int, dict[str, float]]]] = {}
    references: dict[str, tuple[dict[str, Any], dict[int, dict[str, Any]]]] = {}  # TASK: (settings, {seed: side})
    for label, results in grouped.items():
        data = {"variant": results[0]["variant"], "settings": results[0]["settings"], "verdict": verdicts[label]}
        task = tensorboard_layout.task_label(data["settings"], swept)
        name = f"{task}/{tensorboard_layout.side_name(data, 'variant')}"
        runs = [run for r in results for run in r["seeds"]]
        sides[name] = [step_scalars(run["variant"]) for run in runs]
        references.setdefault(task, (data["settings"], {}))[1].update({run["seed"]: run["reference"] for run in runs})
        figures = tensorboard_layout.session_figures([run["variant"]["summary"] for run in runs])
        tensorboard_layout.write_session(base, name, session_hparams(data, "variant", len(runs)), figures,
                                         data["settings"]["steps"])
    for task, (settings, by_seed) in references.items():
        sides[f"{task}/reference"] = [step_scalars(side) for _, side in sorted(by_seed.items())]
        data = {"variant": "reference", "settings": settings, "verdict": []}
        figures = tensorboard_layout.session_figures([side["summary"] for side in by_seed.values()])
        tensorboard_layout.write_session(base, f"{task}/reference", session_hparams(data, "reference", len(by_seed)),
                                         figures, settings["steps"])
    tensorboard_layout.write_pooled(base, sides)
