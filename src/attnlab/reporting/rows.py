"""Records as table rows: one row per module in a job, one row per job in a sweep.

Columns are the record's own names: key config values, in a sweep every other config value in
which its jobs differ (`num_kv_heads`, `weights_init`, `variant.params.window`: `swept_keys`),
`status`, `error`, `first_divergent_stage`, `findings` (codes), then every diagnostics key as is.

`write_rows_csv` is the one writer of every comparison.csv (a job's and a sweep's), with the
csv module: importing pandas costs a large part of a cold single run for a two-row table. The
DataFrame views (notebooks, sweeps, `attnlab compare`) import pandas when they are asked for.
"""

from __future__ import annotations

import csv
import io
import math
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tabulate import tabulate

from attnlab.record import Record, write_atomic
from attnlab.reporting.metrics import SIZES, hparams, reached_sizes

if TYPE_CHECKING:
    import pandas as pd

TABLE_FILE = "comparison.csv"
KEY_COLUMNS = ("variant", "seed", "d_in", "d_out", "n_tokens", "inputs", "weights")
SWEPT_ATTR = "swept_keys"  # a jobs table's attrs: its config columns besides KEY_COLUMNS
Row = dict[str, Any]  # {column: cell}; a column's cells are of its own type (text, number, None)


def record_row(record: Record, module: str = "variant") -> Row:
    """One table row; `module="reference"` gives the reference's row of the same job."""
    is_reference = module == "reference"
    sizes = reached_sizes(record)
    row = {
        "module": module,
        "variant": "reference" if is_reference else record.variant.name,
        "seed": record.seed,
        **{name: sizes.get(name) for name in ("d_in", "d_out", "n_tokens")},  # None: never reached, not 0
        "inputs": (record.config.get("inputs") or {}).get("kind"),
        "weights": record.config.get("weights"),
        "status": record.status,
        "error": record.error or "",
        "first_divergent_stage": None if is_reference else record.first_divergent_stage,
        "findings": "" if is_reference else " ".join(f.code for f in record.findings),
    }
    if record.model is not None:  # a run inside a model: which model and which layer
        row.update(model=record.model.model, layer=record.model.layer)
    if not is_reference and record.predictions:
        row["predictions"] = f"{sum(p.passed for p in record.predictions)}/{len(record.predictions)} passed"
    row.update(record.reference.diagnostics if is_reference else record.variant.diagnostics)
    if record.path is not None:
        row["path"] = str(record.path.parent)
    return row


def module_rows(record: Record) -> list[Row]:
    """The job's comparison: the reference and the variant side by side."""
    return [record_row(record, "reference"), record_row(record, "variant")]


def job_rows(records: Sequence[Record]) -> list[Row]:
    """A job's comparison.csv: the reference and the variant side by side for one seed; one
    variant row per seed for an n_seeds job."""
    return module_rows(records[0]) if len(records) == 1 else [record_row(record) for record in records]


def swept_keys(records: Sequence[Record]) -> list[str]:
    """The config values besides the key columns in which the records differ, as hyperparameter
    names (attnlab.reporting.metrics.hparams), in the config's order. A variant's own params count
    when they differ between jobs of that variant: across variants they follow from its name."""
    configs = [hparams(record) for record in records]
    covered = {*KEY_COLUMNS, "inputs.kind"}
    swept = []
    for key in dict.fromkeys(key for config in configs for key in config):
        values = [(record.variant.name, str(config.get(key))) for record, config in zip(records, configs)]
        if key.startswith("variant.params."):
            differs = any(len({v for name, v in values if name == variant}) > 1 for variant, _ in values)
        else:
            differs = len({v for _, v in values}) > 1
        if differs and key not in covered:
            swept.append(key)
    return swept


def job_order(records: Sequence[Record]) -> list[Record]:
    """The records in the order of a sweep's rows: by variant, then each swept value (the sizes,
    then `swept_keys`; numbers numerically: d_out 2, 8, 32 and num_kv_heads 1, 2, 4), then seed,
    so each configuration's seeds are adjacent."""
    keys = ["d_in", "d_out", "n_tokens", "inputs.kind", "weights", *swept_keys(records)]

    def key(record: Record) -> tuple[str, list[tuple[int, object, str]], int, str]:
        config = hparams(record)
        return (str(record.variant.name), [_order(config.get(k)) for k in keys], record.seed, str(record.path))

    return sorted(records, key=key)


def _order(value: object) -> tuple[int, object, str]:
    """Numbers before text, each in its own order: num_kv_heads reads 1, 2, 4, then None."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return (0, value, "")
    return (1, 0, str(value))


def sweep_rows(records: Sequence[Record]) -> list[Row]:
    """A sweep's comparison: one row per job (the variant's row) in `job_order`, the swept config
    values (`swept_keys`) right after the key columns."""
    records = job_order(records)
    swept = swept_keys(records)
    rows = []
    for record in records:
        row = record_row(record)
        del row["module"]
        config = hparams(record)
        keys = list(row)
        at = keys.index("weights") + 1
        values = {key: config.get(key) for key in swept}
        rows.append({**{k: row[k] for k in keys[:at]}, **values, **{k: row[k] for k in keys[at:]}})
    return rows


def module_table(record: Record) -> pd.DataFrame:
    import pandas as pd

    return pd.DataFrame(module_rows(record)).set_index("module")


def records_table(records: Sequence[Record]) -> pd.DataFrame:
    """A sweep's comparison as a DataFrame (the rows of `sweep_rows`)."""
    import pandas as pd

    records = list(records)
    rows = sweep_rows(records)
    table = pd.DataFrame(rows) if rows else pd.DataFrame(columns=["variant", "seed", "status"])
    for name in (n for n in SIZES if n in table and table[n].isna().any()):  # a size a failed job never reached
        table[name] = pd.Series([row[name] for row in rows], index=table.index, dtype=object)  # 6 stays 6, not 6.0
    table.attrs[SWEPT_ATTR] = swept_keys(records)  # which columns are configuration (attnlab.reporting.aggregate)
    return table


def _columns(rows: list[Row]) -> list[str]:
    return list(dict.fromkeys(key for row in rows for key in row))


def _cell(value: object) -> object:
    """None empty; NaN as `nan` (a value that is not a number, not a missing one)."""
    return "" if value is None else "nan" if isinstance(value, float) and math.isnan(value) else value


FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")  # a spreadsheet runs a text cell starting so as a formula


def _csv_cell(value: object) -> object:
    """A text cell a spreadsheet would run as a formula gets a leading `'`; numbers stay numbers."""
    value = _cell(value)
    return f"'{value}" if isinstance(value, str) and value.startswith(FORMULA_STARTS) else value


def write_rows_csv(rows: list[Row], path: Path) -> Path:
    columns = _columns(rows)
    text = io.StringIO()
    writer = csv.writer(text, lineterminator="\n")
    writer.writerow(columns)
    writer.writerows([_csv_cell(row.get(column)) for column in columns] for row in rows)
    write_atomic(path, text.getvalue())
    return path


def rows_markdown(rows: list[Row], *, transpose: bool = False, floatfmt: str = ".4g") -> str:
    """A markdown table of rows; transposed, one column per row (the job's reference vs variant).

    Cells are formatted here and tabulate only lays them out: its number detection on every cell
    of ~60 columns was a visible share of a book-size job."""
    columns = _columns(rows)
    cells = [[_markdown_cell(row.get(column), floatfmt) for column in columns] for row in rows]
    if transpose:  # the first column (`module`: reference, variant) is the header row
        transposed = [[c, *values] for c, *values in zip(columns, *cells)]
        table: str = tabulate(transposed[1:], headers=transposed[0], tablefmt="pipe", disable_numparse=True)
        return table
    table = tabulate(cells, headers=columns, tablefmt="pipe", disable_numparse=True)
    return table


def _markdown_cell(value: object, floatfmt: str) -> str:
    value = _cell(value)
    return format(value, floatfmt) if isinstance(value, float) else str(value)
