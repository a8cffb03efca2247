"""Which TensorBoard run a sweep's job writes to.

TensorBoard selects a logdir's runs when it opens only while there are at most 40 of them: with
more, every tab opens empty until runs are ticked by hand. So a sweep's jobs share runs: one per
configuration (the variant and every swept value but the seed, as comparison.md pools them) when
those and the sweep's curve runs fit in 40, else one per variant. Within a run each job is at its
own step (its job number), so no job covers another.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path

from attnlab.record import Record
from attnlab.reporting.metrics import run_label
from attnlab.reporting.multirun import swept_values
from attnlab.reporting.sweep_plots import POOLED

RUNS_SELECTED_BY_DEFAULT = 40  # TensorBoard's MAX_NUM_RUNS_TO_ENABLE_BY_DEFAULT (webapp/runs/store)


def run_keys(sweep_dir: Path) -> tuple[str, ...]:
    """The swept hyperparameters a job's run is named by, besides its variant: every swept one but
    the seed when the sweep's runs then fit in RUNS_SELECTED_BY_DEFAULT, else none."""
    values = swept_values(sweep_dir)
    keys = tuple(key for key in values if key not in (*POOLED, "variant"))
    configurations = _product(values, ("variant", *keys))
    if configurations is not None and configurations + _curve_runs(values, keys) <= RUNS_SELECTED_BY_DEFAULT:
        return keys
    return ()


def run_folder_name(label: str) -> str:
    """A run's folder name for a label (`gqa d_out=8` or `gqa · d_out=8` -> `gqa,d_out=8`; an edit's
    `ablate_head(head=0, mode=zero) layer=0` -> `ablate_head,head=0,mode=zero,layer=0`)."""
    words = label.replace(" · ", ",").replace(", ", ",").replace("(", ",").replace(")", "").replace(" ", ",")
    return "".join(c if c.isalnum() or c in "._=-," else "_" for c in words)


def job_run_dir(record: Record, sweep_dir: Path) -> Path:
    """The folder of the TensorBoard run a sweep's job writes to: `<sweep>/<variant>,<key=value>...`."""
    return Path(sweep_dir) / run_folder_name(run_label(record, run_keys(sweep_dir), seed=False))


def _curve_runs(values: Mapping[str, list[str] | None], keys: Sequence[str]) -> int:
    """How many `sweep/<line>` runs the sweep's curves add: a line per variant and per value of
    every other key, for each numeric key (attnlab.reporting.sweep_plots.line_labels)."""
    lines = 0
    for key in keys:
        listed = values[key]
        if listed is not None and len(listed) > 1 and all(_is_number(v) for v in listed):
            lines += _product(values, ("variant", *(k for k in keys if k != key))) or RUNS_SELECTED_BY_DEFAULT
    return lines


def _product(values: Mapping[str, list[str] | None], keys: Sequence[str]) -> int | None:
    """How many combinations of `keys`' values (a key the sweep does not vary counts once); None
    where one of them cannot be listed."""
    counts = [values.get(key, [""]) for key in keys]
    sizes = [len(c) for c in counts if c is not None]
    return None if len(sizes) < len(counts) else math.prod(sizes)


def _is_number(text: str) -> bool:
    try:
        return math.isfinite(float(text))
    except ValueError:
        return False
