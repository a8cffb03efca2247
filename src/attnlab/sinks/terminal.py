"""The terminal summary of a run: what a learner reads first.

Config in one line, the shape trace against the predicted shapes, the variant's attention
weights and context vectors with token labels, each stage's largest difference from the
reference, then the diagnosis and the predictions; for an n_seeds job a line per seed. Paths are
shown relative to the working folder when they are inside it.
"""

from __future__ import annotations

import math
import os
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

import numpy as np

from attnlab.capture.stages import STAGES
from attnlab.diagnosis.message_format import heads_phrase
from attnlab.printable import escaped
from attnlab.record import Record
from attnlab.reporting.rows import TABLE_FILE
from attnlab.shown_paths import display_path
from attnlab.sinks.base import REPORT_FILE, JobInfo
from attnlab.sinks.model_lines import inputs_given, layer_lines, print_layers
from attnlab.sinks.views import no_findings_message, shape_trace

if TYPE_CHECKING:
    from attnlab.training.job import TrainingResult

MAX_SHOWN = 8  # rows and columns of a matrix printed in full; larger ones are cut with "…"
TERMINAL_ROWS = 20  # per-seed lines printed before the rest are elided (all are in comparison.csv)


class TerminalSink:
    """`log.terminal`: each job's summary on stdout (a line per seed for n_seeds). A sweep's table
    at its end is the sweep's own report (attnlab.app.sweep.print_summary), printed either way."""

    def write(self, records: Sequence[Record], job: JobInfo) -> None:
        with reader_may_leave():
            table, report = job.dir / TABLE_FILE, Path(job.dir) / REPORT_FILE
            if len(records) == 1:
                print_record(records[0])
                print(f"record: {display_path(records[0].path)}", flush=True)
            elif records[0].model is not None:  # the layers of a model
                assert records[0].path is not None  # written before the sinks run
                glob = f"{display_path(records[0].path.parent.parent)}/layer-*/record.json"
                print_layers(records, Path(display_path(table)) if table.exists() else None, glob, sys.stdout)
            else:
                print_seeds(list(records), table if table.exists() else None)
            if report.exists() and (len(records) == 1 or records[0].model is not None):  # the html sink ran before (the terminal runs last)
                print(f"report: {display_path(report)} (open it in a browser)")
            sys.stdout.flush()

    def write_training(self, result: TrainingResult, job: JobInfo) -> None:
        print_training(result)


def print_training(result: TrainingResult) -> None:
    """A training run's verdict and table."""
    from attnlab.sinks.training_files import terminal_text

    print(terminal_text(result.as_dict()))


@contextmanager
def reader_may_leave() -> Iterator[None]:
    """`attnlab ... | head`: the reader closing the pipe is not a failure of the run. Printing
    stops (stdout goes to /dev/null) and the outputs after it, TensorBoard's, are still written."""
    try:
        yield
    except BrokenPipeError:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)


def shown(record: Record) -> tuple[int, int]:
    """The batch item and head the terminal shows (top-level show.batch, show.head)."""
    show = record.config.get("show") or {}
    return int(show.get("batch", 0)), int(show.get("head", 0))


def config_line(record: Record) -> str:
    params = record.config.get("variant", {}).get("params") or {}
    extra = "".join(f" {k}={v}" for k, v in params.items())
    weights = record.variant.canonical("weights")
    precision = ((f" device={record.device}" if record.device != "cpu" else "")
                 + (f" dtype={record.dtype}" if record.dtype != "float32" else ""))
    heads = "" if weights is None or weights.ndim != 4 or weights.shape[:2] == (1, 1) else (
        f" batch={weights.shape[0]} heads={weights.shape[1]}")
    return (
        f"attnlab · variant={record.variant.name}{extra} seed={record.seed} inputs={inputs_given(record)} "
        f"n_tokens={record.n_tokens} d_in={record.d_in} d_out={record.d_out} weights={record.config['weights']} "
        f"reference={record.reference.name}{heads}{precision}"
    )


def returned_line(record: Record) -> str | None:
    """What forward returned when the output is one element of it, and the weights it returned."""
    if record.output_element is None:
        return None
    weights = f"; its attention weights: {record.returned_weights}" if record.returned_weights else ""
    return f"returned: {record.returned}; output = {record.output_element}{weights}"


def format_matrix(values: np.ndarray, row_labels: list[str], col_labels: list[str] | None) -> str:
    rows, cols = values.shape
    shown_rows, shown_cols = min(rows, MAX_SHOWN), min(cols, MAX_SHOWN)
    col_names = (col_labels or [f"[{j}]" for j in range(cols)])[:shown_cols] + (["…"] if cols > shown_cols else [])
    width = max(8, *(len(c) + 1 for c in col_names))
    label_width = max(len(label) for label in row_labels[:shown_rows])
    lines = [" " * (label_width + 2) + "".join(c.rjust(width) for c in col_names)]
    for i in range(shown_rows):
        cells = "".join(f"{v:.4f}".rjust(width) for v in values[i, :shown_cols])
        lines.append(f"  {row_labels[i].ljust(label_width)}{cells}{'…'.rjust(width) if cols > shown_cols else ''}")
    if rows > shown_rows:
        hidden = rows - shown_rows
        lines.append(f"  … {hidden} more row{'s' if hidden > 1 else ''}")
    return "\n".join(lines)


def divergence_line(record: Record) -> str:
    parts = []
    for stage in STAGES[1:]:
        if (stage == "weights_applied" and stage not in record.variant.shapes) or (
                stage == "output" and record.output_is_context):
            continue
        value = record.variant.diagnostics.get(f"divergence_{stage}")
        parts.append(f"{stage} {'—' if value is None or np.isnan(value) else f'{value:.4g}'}")
    first = record.first_divergent_stage or "none"
    return "max |variant − reference|: " + " · ".join(parts) + f"\nfirst divergent stage: {first}"


def print_record(record: Record, out: TextIO | None = None) -> None:
    out = out or sys.stdout

    def say(text: str = "") -> None:  # labels and errors: never raw controls
        print(escaped(text, lines=True), file=out)

    say(config_line(record))
    for note in record.notes:
        say(f"note: {note}")
    for line in layer_lines(record) if record.model is not None else ():
        say(line)
    if not record.ok:
        say(f"FAILED: {record.error}")
        return
    say(shape_trace(record))
    returned = returned_line(record)
    if returned:
        say(returned)
    batch, head = shown(record)
    where = f", head {head}, batch item {batch}" if record.variant.num_heads > 1 or batch else ""
    for stage, title in (("weights", "attention weights"), ("context", "context vectors")):
        values = record.variant.matrix(stage, batch=batch, head=head)
        if values is None:
            say(f"{title}: not captured")
            continue
        col_labels = record.labels if stage == "weights" else None
        say(f"{title} ({record.variant.name}{where}):\n{format_matrix(values, record.labels, col_labels)}")
    if record.variant.num_heads > 1:
        say(head_lines(record))
    say(divergence_line(record))
    if record.findings:
        say("findings:")
        for finding in record.findings:
            heads = f", {heads_phrase(finding, record.variant.num_heads)}" if record.variant.num_heads > 1 else ""
            say(f"  [{finding.code} @ {finding.stage}{heads}] {finding.message}")
    else:
        say(no_findings_message(record))
    for sentence in record.not_checked:
        say(f"  {sentence}")
    if record.predictions:
        say("predictions:")
    for prediction in record.predictions:
        say(f"  {prediction.sentence}")


def head_lines(record: Record) -> str:
    """One line per head: its entropy, row max and divergence from the reference's head."""
    per_head = record.head_diagnostics
    lines = ["per head:    entropy  row max  max |Δ weights|  max |Δ context|"]
    for h in range(record.variant.num_heads):
        cells = [per_head.get(name, [])[h] if h < len(per_head.get(name, [])) else float("nan") for name in
                 ("weights_entropy_mean", "weights_row_max_mean", "divergence_weights", "divergence_context")]
        lines.append(f"  head {h:<4}" + "".join(_number(v).rjust(w) for v, w in zip(cells, (9, 9, 17, 17))))
    return "\n".join(lines)


def _number(value: object) -> str:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return "—" if math.isnan(value) else f"{value:.4g}"
    return "—"


def seed_lines(records: list[Record]) -> list[str]:
    """A compact table: a line per seed, the first and last ones when there are many."""
    header = ("seed", "status", "first divergent", "max |Δ context|", "entropy", "findings")
    rows = [
        (str(r.seed), r.status, r.first_divergent_stage or "none", _number(r.variant.diagnostics.get("divergence_context")),
         _number(r.variant.diagnostics.get("weights_entropy_mean")),
         (" ".join(f.code for f in r.findings) or "—") if r.ok else (r.error or "")[:60])
        for r in records
    ]
    if len(rows) > TERMINAL_ROWS:
        head, tail = TERMINAL_ROWS - 5, 5
        rows = [*rows[:head], ("…", f"{len(rows) - head - tail} more", "", "", "", ""), *rows[-tail:]]
    widths = [max(len(row[i]) for row in (header, *rows)) for i in range(len(header))]

    def fmt(row: Sequence[str]) -> str:
        return "  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip()

    return [fmt(header), *map(fmt, rows)]


def print_seeds(records: list[Record], table_path: Path | None, out: TextIO | None = None) -> None:
    out = out or sys.stdout
    first = records[0]
    n_failed = sum(not r.ok for r in records)
    codes = sorted({f.code for r in records for f in r.findings})
    print(f"attnlab · variant={first.variant.name} seeds={first.seed}..{records[-1].seed} ({len(records)}) "
          f"inputs={inputs_given(first)} n_tokens={first.n_tokens} d_in={first.d_in} "
          f"d_out={first.d_out} weights={first.config.get('weights')}", file=out)
    for line in seed_lines(records):
        print("  " + escaped(line), file=out)
    with_findings = sum(bool(r.findings) for r in records)
    print(f"findings: {', '.join(codes) or 'none'} ({with_findings}/{len(records)} seeds)"
          + (f"; {n_failed} failed" if n_failed else ""), file=out)
    if table_path is not None:
        print(f"table: {display_path(table_path)}", file=out)
    assert first.path is not None  # written before the sinks run
    print(f"records: {display_path(first.path.parent.parent)}/seed-*/record.json", file=out)
