"""TensorBoard sink: a single run is one TensorBoard run, its event file directly in the job
folder; a sweep's jobs share runs in the sweep's folder, one per configuration or per variant
(attnlab.sinks.tensorboard_runs), so TensorBoard opens on them with every run selected.

Nothing here creates a sub-run (no timestamped HParams folder, no writer per key), so a sweep
folder alone is a valid logdir. A single run is one point at step 0, a sweep's job at its job
number (an n_seeds job: one point per seed, at step=seed; a run inside a model: one point per
layer, at step=layer), its images, histograms and texts too. The HParams dashboard has a session
per TensorBoard run (a single run's own; a sweep's written when it ends, named `<sweep> <run>`),
its findings and first divergent stage as columns. A sweep's curves are its Custom Scalars, the
only layout written (jobs write none).

Tags:
- scalars: every numeric diagnostic under its grouped name (attnlab.reporting.metrics: `divergence/context`,
  `scaling/observed`, the reference's own under `reference/...`).
- images: `heatmaps/{variant,reference,difference}/<stage>` (a grid of all heads), each head's as
  `heads/<stage>/head<h>/{variant,reference,difference}` (`head_first`), `.../crop64` above 256
  tokens: attnlab.reporting.job_heatmaps, the PNGs in the job's heatmaps/; a run inside a model:
  `heatmaps/model/weights`, the model's own head grid at step=layer.
- histograms: `histograms/{variant,reference}/<stage>`.
- text: `text/table` (a header row, then a row per column of comparison.csv), `text/findings`,
  `text/config` (YAML, without Hydra's `_target_`/`_convert_`).
- hparams: one session per TensorBoard run; the metrics are scalar tags logged above.

The event file and summaries are written by attnlab.sinks.tensorboard_format, with the `crc32c`
package's checksum: the record writer of tensorboard computes the same checksum in pure Python,
which cost most of a book-size job's TensorBoard time (benchmarks/README.md), and it cannot be
given another one without patching it for every user in the process. TensorBoard is imported
inside the functions: a run that does not log to it should not pay for the import.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from attnlab.record import Record
from attnlab.reporting.job_heatmaps import job_heatmaps
from attnlab.reporting.metrics import (
    KEY_METRICS,
    findings_markdown,
    hparams,
    json_default,
    metric_name,
    metric_values,
    run_label,
)
from attnlab.reporting.multirun import swept_hparams
from attnlab.reporting.rows import job_rows, rows_markdown
from attnlab.sinks.base import JobInfo
from attnlab.sinks.model_html import model_head_grid
from attnlab.sinks.model_lines import model_of
from attnlab.sinks.tensorboard_format import EventFile, hparams_summaries, image_summary, scalars_summary
from attnlab.sinks.tensorboard_runs import job_run_dir, run_folder_name, run_keys

if TYPE_CHECKING:

    from attnlab.reporting.aggregate import Report
    from attnlab.reporting.sweep_plots import Curve
    from attnlab.training.job import TrainingResult
    from attnlab.training.sweep_table import TrainingSweep

HISTOGRAM_STAGES = ("weights", "context")
HISTOGRAM_BINS = 64  # uniform bins: TensorBoard's default ~1500 exponential buckets are slow at 4096^2
HISTOGRAM_SAMPLE = 2**22

class TensorBoardSink:
    """`log.tensorboard`: the job's TensorBoard run (`images` and `histograms` follow `log.images`
    and `log.histograms` through conf/sink/tensorboard.yaml)."""

    def __init__(self, images: bool = True, histograms: bool = True, plots: Sequence[str] | None = None) -> None:
        self.images, self.histograms = images, histograms
        self.plots = plots  # the sweep's curves (plots.diagnostics); None: attnlab.reporting.sweep_plots' default set

    def write(self, records: Sequence[Record], job: JobInfo) -> None:
        markdown = rows_markdown(job_rows(records), transpose=len(records) == 1)
        write_tensorboard(list(records), job.dir, table_markdown=markdown, images=self.images,
                          histograms=self.histograms,
                          job=job)

    def write_sweep(self, report: Report, folder: Path) -> None:
        from attnlab.reporting.sweep_plots import DEFAULT_DIAGNOSTICS, sweep_curves

        curves, _ = sweep_curves(report, DEFAULT_DIAGNOSTICS if self.plots is None else list(self.plots))
        write_sweep_curves(curves, Path(folder) / SWEEP_RUN)
        write_sweep_sessions(report, Path(folder))

    def write_training(self, result: TrainingResult, job: JobInfo) -> None:
        """A training job's runs (attnlab.sinks.training_tensorboard): in a sweep, under the sweep's
        folder, its pooled run and sessions left to the sweep's end."""
        from attnlab.sinks.training_tensorboard import swept_keys, write_job

        in_sweep = job.sweep_dir is not None
        base = Path(job.sweep_dir if job.sweep_dir is not None else job.dir) / "tensorboard"
        write_job(result.as_dict(), base, swept_keys(Path(job.sweep_dir)) if job.sweep_dir is not None else (),
                  pooled=not in_sweep, seeds=result.seeds if self.images else None)

    def write_training_sweep(self, sweep: TrainingSweep, folder: Path) -> None:
        from attnlab.sinks.training_tensorboard import write_sweep_bands

        write_sweep_bands(Path(folder), sweep)


SWEEP_RUN = "sweep"  # <sweep>/sweep/<line>: one TensorBoard run per line (variant), so each is its own line


def write_sweep_curves(curves: Sequence[Curve], folder: Path) -> None:
    """The sweep's curves as scalars: a run per line label under `folder`, tags
    `Sweep/<key>/<diagnostic tag>/{mean,lower,upper}` (lower, upper: mean ∓ std over seeds; a capital
    S: the Time Series tab lists this group before the jobs' own, which are lower case) at
    step = the swept value when every value is an integer, else its index (named in the chart's
    title), and a custom-scalars layout: a category per swept key, a margin chart per diagnostic.
    Runs written by an earlier call are replaced: the sweep's end can rebuild its outputs."""
    from attnlab.sinks.tensorboard_format import custom_scalars

    _remove_sweep_runs(folder)
    if not curves:
        return
    layout: dict[str, dict[str, list[str | list[str]]]] = {}
    for curve in reversed(curves):  # the dashboard lays a category's charts out last first (TensorBoard 2.21)
        tag = sweep_tag(curve)
        layout.setdefault(f"sweep: against {curve.key}", {})[_chart_title(curve)] = [
            "Margin", [f"{tag}/mean", f"{tag}/lower", f"{tag}/upper"]]
    layout = dict(reversed(layout.items()))  # categories in the order of the keys, charts reversed within each
    for label in dict.fromkeys(label for curve in curves for label in curve.lines):
        with EventFile(folder / run_folder_name(label)) as events:
            for curve in curves:
                step = sweep_steps(curve)
                tag = sweep_tag(curve)
                for point in curve.lines.get(label, []):
                    values = {f"{tag}/mean": point.mean, f"{tag}/lower": point.mean - point.std,
                              f"{tag}/upper": point.mean + point.std}
                    events.add(scalars_summary(values), step=step[point.x])
            events.add(custom_scalars(layout))  # in every run: TensorBoard merges equal charts


def sweep_tag(curve: Curve) -> str:
    return f"Sweep/{curve.key}/{metric_name(curve.diagnostic)}"


def sweep_steps(curve: Curve) -> dict[float, int]:
    """{swept value: step}: the value itself when every value is an integer, else its index."""
    return {x: int(x) if curve.integer_steps else i for i, x in enumerate(curve.xs)}


def _chart_title(curve: Curve) -> str:
    title = f"{metric_name(curve.diagnostic)} (mean ± std over seeds)"
    if curve.integer_steps:
        return f"{title}, step = {curve.key}"
    mapping = ", ".join(f"{i} = {x:g}" for i, x in enumerate(curve.xs))
    return f"{title}, step = index of {curve.key}: {mapping}"


def _remove_sweep_runs(folder: Path) -> None:
    for events in Path(folder).glob("*/events.out.tfevents.*"):
        events.unlink()
    for run in Path(folder).glob("*"):
        if run.is_dir() and not any(run.iterdir()):
            run.rmdir()


def write_tensorboard(
    records: list[Record],
    job_dir: Path,
    *,
    table_markdown: str,
    images: bool = True,
    histograms: bool = True,
    job: JobInfo | None = None,
) -> None:
    """Write one job: a single run's as one TensorBoard run whose event file sits in `job_dir`; a
    sweep's job into the run it shares with its configuration or its variant
    (attnlab.sinks.tensorboard_runs), an event file of its own at its job's number.

    One record is logged at step 0, or at its job's number in a sweep: a chart of a sweep's runs
    reads along its jobs. Several (an `n_seeds` job) put each seed's scalars at step=seed, so the
    charts show the spread over seeds; the images, histograms and texts come from the first record
    that ran. A single run's HParams session is its own; a sweep's are written when it ends
    (`write_sweep_sessions`), one per shared run.
    """
    ok = [record for record in records if record.ok]
    first = ok[0] if ok else records[0]  # a failed job still gets its error (and a single run its failed session)
    in_sweep = job is not None and job.sweep_dir is not None and job.num is not None
    step = job.num if job is not None and job.num is not None else 0
    with _job_events(first, job) if in_sweep and job is not None else EventFile(job_dir) as events:
        for record in ok:
            events.add(scalars_summary(metric_values(record)), step=_step(record, len(records), step))
        if images:
            _write_heatmaps(events, first, job_dir, step)
            for record in (r for r in ok if r.model is not None and r.reference.stages.get("weights") is not None):
                events.add(image_summary("heatmaps/model/weights", model_head_grid(record)), step=model_of(record).layer)
        if histograms:
            _write_histograms(events, first, step)
        _write_texts(events, {"table": table_markdown, "findings": findings_markdown(first),
                              "config": config_markdown(first.config)}, step)
        if not in_sweep:
            scalars = metric_values(first)
            for summary in hparams_summaries(session_hparams(first), [tag for tag in KEY_METRICS if tag in scalars], shown=VERDICT,
                                             ok=first.ok, trial=trial_name(first, job or JobInfo(Path(job_dir)))):
                events.add(summary)


def _job_events(record: Record, job: JobInfo) -> EventFile:
    """A sweep job's event file in its shared run, named by its job number: a resumed sweep's job
    run again replaces its own file, never adds a second image at its step."""
    assert job.sweep_dir is not None  # a sweep's job
    folder, suffix = job_run_dir(record, job.sweep_dir), f".job{job.num}"
    for old in [*folder.glob(f"events.out.tfevents.*{suffix}"), *folder.glob(f".attnlab-events.*{suffix}.tmp")]:
        old.unlink()  # an earlier run of this job, and the part a killed one left
    return EventFile(folder, suffix=suffix)


def write_sweep_sessions(report: Report, folder: Path) -> None:
    """HParams' sessions of a sweep: one per shared run (its configuration, or its variant), named
    `<sweep folder> <run label>`, with the values its jobs share and their verdicts together (the
    first divergent stages and findings of all of them; failed if one failed). Written when the
    sweep ends, in a file of its own per run that a later end replaces."""
    keys = run_keys(folder)
    groups: dict[str, list[Record]] = {}
    for record in report.records:
        groups.setdefault(run_label(record, keys, seed=False), []).append(record)
    swept = [key for key in swept_hparams(folder) if key == "variant" or key in keys]  # what tells the runs apart
    for old in Path(folder).glob(f"*/events.out.tfevents.*{SESSIONS_SUFFIX}"):
        old.unlink()
    for label, records in groups.items():
        with EventFile(Path(folder) / run_folder_name(label), suffix=SESSIONS_SUFFIX) as events:
            for summary in hparams_summaries(group_hparams(records, swept), list(KEY_METRICS), shown=VERDICT,
                                             ok=all(r.ok for r in records), swept=swept,
                                             trial=f"{Path(folder).name} {label}"):
                events.add(summary)


SESSIONS_SUFFIX = ".sessions"  # the sweep's end writes these files; its next end replaces them


def group_hparams(records: Sequence[Record], swept: Sequence[str]) -> dict[str, bool | int | float | str]:
    """What HParams shows of the jobs sharing a run: the hyperparameters they share (a seed they
    differ in is not one), then their verdicts together, each distinct one once."""
    shared = dict(hparams(records[0]))
    for record in records[1:]:
        shared = {key: value for key, value in hparams(record).items() if shared.get(key) == value}
    verdicts = [session_hparams(record) for record in records]
    together = {name: " / ".join(dict.fromkeys(str(v[name]) for v in verdicts)) for name in VERDICT}
    return {**{key: shared[key] for key in swept if key in shared}, **together,
            **{key: value for key, value in shared.items() if key not in swept}}


def _step(record: Record, n_records: int, single: int) -> int:
    """A run inside a model: the layer (each measure against the layer); an n_seeds job: the seed;
    one record: `single` (0, or the job's number in a sweep)."""
    if record.model is not None:
        return record.model.layer
    return single if n_records == 1 else record.seed


VERDICT = ("status", "first_divergent_stage", "findings")  # marked as differing: shown beside the swept keys


def session_hparams(record: Record) -> dict[str, bool | int | float | str]:
    """What HParams shows of a job: its config (attnlab.reporting.metrics.hparams), then its verdict
    as columns to sort and filter by: its status, the first divergent stage and the findings' codes."""
    verdict = {"status": record.status,
               "first_divergent_stage": str(record.first_divergent_stage or "none") if record.ok else "failed",
               "findings": " ".join(f.code for f in record.findings) or "none"}
    return {**hparams(record), **verdict}


def trial_name(record: Record, job: JobInfo) -> str:
    """A single run's HParams trial: its folder name and seed (trials of one name are pooled into
    one row)."""
    return f"{Path(job.dir).name} s{record.seed}"


def _write_heatmaps(events: EventFile, record: Record, job_dir: Path, step: int) -> None:
    for tag, image in job_heatmaps(record, job_dir):
        events.add(image_summary(head_first(tag), image), step=step)


def head_first(tag: str) -> str:
    """`heatmaps/variant/weights/head2` -> `heads/weights/head2/variant`: TensorBoard pages a tag
    group's images a dozen at a time in name order, which put every head past the overview grids,
    a head's variant, reference and difference pages apart; the group `heads` comes first, and
    within it one head's three maps sit together."""
    parts = tag.split("/")
    if len(parts) == 4 and parts[0] == "heatmaps" and parts[3].startswith("head") and parts[3][4:].isdigit():
        return f"heads/{parts[2]}/{parts[3]}/{parts[1]}"
    return tag


def _write_histograms(events: EventFile, record: Record, step: int) -> None:
    """Histograms of the finite values only: np.histogram cannot bin NaN or infinity, and the
    non_finite/<stage> scalars already count them. Above HISTOGRAM_SAMPLE values, of an evenly
    strided sample (a 4096-token stage would otherwise be copied whole)."""
    from attnlab.sinks.tensorboard_format import histogram

    for stage in HISTOGRAM_STAGES:
        for source, stages in (("variant", record.variant.stages), ("reference", record.reference.stages)):
            values = stages.get(stage)
            if values is None:
                continue
            values = np.asarray(values).reshape(-1)
            if values.size > HISTOGRAM_SAMPLE:  # an evenly strided sample: a view, not a copy of the stage
                values = values[:: -(-values.size // HISTOGRAM_SAMPLE)]
            finite = values[np.isfinite(values)]
            if finite.size:
                events.add(histogram(f"histograms/{source}/{stage}", finite, bins=HISTOGRAM_BINS), step=step)


def _write_texts(events: EventFile, texts: dict[str, str], step: int) -> None:
    """Markdown under `text/<name>`, via tensorboard's own text summary: torch's add_text would
    append `/text_summary` to every tag."""
    from tensorboard.plugins.text.summary_v2 import text_pb

    for name, markdown in texts.items():
        events.add(text_pb(f"text/{name}", markdown), step=step)


def config_markdown(config: Mapping[str, Any]) -> str:
    """The resolved config as a fenced YAML block (TensorBoard's markdown renders fenced code),
    without Hydra's instructions for building values (`_target_`, `_convert_`). libyaml's emitter
    where installed: the same text as PyYAML's own, which was a visible share of a job's output."""
    import yaml

    text = yaml.dump(_without_internals(json.loads(json.dumps(config, default=json_default))),
                     Dumper=getattr(yaml, "CSafeDumper", yaml.SafeDumper), sort_keys=False, default_flow_style=None,
                     width=100)
    return "```yaml\n" + text.rstrip("\n") + "\n```"


def _without_internals(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _without_internals(v) for k, v in value.items() if not (k.startswith("_") and k.endswith("_"))}
    return value


