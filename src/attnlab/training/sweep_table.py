"""A sweep of training jobs pooled: every job's training.json under the sweep folder, grouped by
variant and training settings, each group's seeds (from all its jobs) into one table and verdict
(`TrainingSweep`), which the sinks write (`write_training_sweep`: the table sink's
training_comparison.md and .csv, TensorBoard's pooled bands and sessions)."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from attnlab.training.lr_grid import grid_markdown
from attnlab.training.verdict import judged

RESULT_FILE = "training.json"


@dataclass(frozen=True)
class TrainingSweep:
    """A sweep of training jobs pooled: `text` its tables and verdicts in markdown, `rows` the tables'
    rows (each with its group), `grouped` {label: the jobs' training.json}, `verdicts` {label: sentences}."""

    text: str
    rows: list[dict[str, Any]]
    grouped: dict[str, list[dict[str, Any]]]
    verdicts: dict[str, list[str]]


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


def pooled_sweep(folder: Path) -> TrainingSweep | None:
    """The sweep's pooled tables and verdicts (None: the sweep trained nothing)."""
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
    return TrainingSweep("\n\n".join(sections) + "\n", table_rows, grouped, verdicts)
