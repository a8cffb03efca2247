"""Records as pandas tables: one row per module in a job, one row per job in a sweep.

Columns are the record's own names: key config values, `status`, `error`,
`first_divergent_stage`, `findings` (codes), then every diagnostics key as is.
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterable

import pandas as pd

from attnlab.record import Record, write_atomic

KEY_COLUMNS = ("variant", "seed", "d_in", "d_out", "n_tokens", "inputs", "weights")


def record_row(record: Record, module: str = "variant") -> dict:
    """One table row; `module="reference"` gives the reference's row of the same job."""
    is_reference = module == "reference"
    row = {
        "module": module,
        "variant": "reference" if is_reference else record.variant,
        "seed": record.seed,
        "d_in": record.d_in,
        "d_out": record.d_out,
        "n_tokens": record.n_tokens,
        "inputs": (record.config.get("inputs") or {}).get("kind"),
        "weights": record.config.get("weights"),
        "status": record.status,
        "error": record.error or "",
        "first_divergent_stage": None if is_reference else record.first_divergent_stage,
        "findings": "" if is_reference else " ".join(f.code for f in record.findings),
    }
    if not is_reference and record.predictions:
        row["predictions"] = f"{sum(p.passed for p in record.predictions)}/{len(record.predictions)} passed"
    row.update(record.reference_diagnostics if is_reference else record.diagnostics)
    if record.path is not None:
        row["path"] = str(record.path.parent)
    return row


def module_table(record: Record) -> pd.DataFrame:
    """The job's comparison: the reference and the variant side by side."""
    return pd.DataFrame([record_row(record, "reference"), record_row(record, "variant")]).set_index("module")


def records_table(records: Iterable[Record]) -> pd.DataFrame:
    """A sweep's comparison: one row per job (the variant's row), in a stable order."""
    rows = [record_row(r) for r in records]
    if not rows:
        return pd.DataFrame(columns=["variant", "seed", "status"])
    table = pd.DataFrame(rows).drop(columns=["module"])
    return table.sort_values(["variant", "seed"], kind="stable").reset_index(drop=True)


def to_markdown(table: pd.DataFrame, floatfmt: str = ".4g") -> str:
    return table.to_markdown(floatfmt=floatfmt)


def write_table_csv(table: pd.DataFrame, path: Path, index: bool = True) -> Path:
    write_atomic(path, table.to_csv(index=index))
    return path
