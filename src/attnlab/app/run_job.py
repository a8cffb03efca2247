"""One Hydra job: check, build the sinks, run every seed, write each record first, then the sinks.

The record is written atomically before any sink runs, so a sink that fails (or a Ctrl-C) never
loses a finished result; sweep tables are rebuilt from these files.

One seed (the default) writes into the job folder: record.json, then what each sink switched on
by `log.NAME` writes (comparison.csv, the TensorBoard run, the terminal summary, yours).

`n_seeds=N` runs seeds seed .. seed+N-1 in the same process, the config read once, and writes
`seed-<s>/record.json` per seed (each equal to that seed's single run; `attnlab compare` and
the sweep tables find them under the job folder); the sinks get every seed's record at once
(one table with a row per seed, one TensorBoard run with each seed at step=seed, a compact
terminal table).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Sequence
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from attnlab.app.config_checks import validate
from attnlab.app.config_values import check_n_tokens, check_values, container, declared_n_tokens, wants_training
from attnlab.app.job_records import records_on_disk
from attnlab.app.job_settings import (
    check_unused,
    inputs_values,
    job_spec,
    model_request,
    sink_settings,
    training_request,
    wants_model,
)
from attnlab.app.progress import Progress
from attnlab.compute.memory import available_bytes, cap_process, check_declared_inputs
from attnlab.compute.pipeline import JobSpec, compute_record
from attnlab.diagnosis.predictions import validate_expectations
from attnlab.errors import TokensNeeded, UserError, WidthNeeded
from attnlab.inputs.kinds import make_inputs
from attnlab.model.config_variants import takes_config
from attnlab.model.finding_codes import NAMES as MODEL_RUN_CODES
from attnlab.model.model_job import check_model_request, compute_model_records
from attnlab.modules.registry import CONSTRUCTOR_KEYS, check_head_split, constructor_kwargs, get_variant
from attnlab.record import Record, Setup, keeping_stages, record_of, spilled, without_stages, write_record, written
from attnlab.record.completion import mark_done, unmark
from attnlab.record.files import RECORD_FILE
from attnlab.record.keeping import stage_bytes
from attnlab.sinks.base import JobInfo, build_sinks
from attnlab.sinks.terminal import print_training
from attnlab.sinks.training_files import write_training_run
from attnlab.training.config_job import check_training, training_job
from attnlab.training.counterparts import MODEL_CHANGES
from attnlab.training.job import TrainingResult

SEED_DIR = "seed-{seed}"
LAYER_DIR = "layer-{layer}"


def check(cfg: DictConfig) -> dict[str, Any]:
    """Everything that can be wrong with the request, before any work: the values, unknown keys,
    the predictions, the variant and its params, the reference, the sinks; returns the sinks.
    attnlab's sweeper runs it on every value of a sweep before the first job."""
    validate(cfg)
    validate_expectations(container(cfg.expect), MODEL_RUN_CODES)
    if cfg.variant.name in MODEL_CHANGES and not wants_training(cfg):
        raise UserError(f"variant={cfg.variant.name}: a change of the model ({MODEL_CHANGES[cfg.variant.name]}), "
                        f"not of its attention layer: it runs with training=induction, mqar or text")
    check_constructor(cfg)
    if cfg.reference != "auto":
        get_variant(cfg.reference)
    check_unused(cfg)
    if wants_model(cfg):
        check_model_request(model_request(cfg, checking=True))
    if wants_training(cfg):
        check_training(training_request(cfg))
    return build_sinks(sink_settings(cfg))


def check_constructor(cfg: DictConfig) -> None:
    """The variant's constructor filled from the config: its parameters' names, and d_out split
    into num_heads where it takes both. In a model the model's config builds it, and a change of the
    training model has no constructor of its own: not checked."""
    if cfg.variant.name in MODEL_CHANGES:
        return
    if wants_model(cfg) and takes_config(get_variant(cfg.variant.name).cls):
        return
    values = {key: cfg[key] for key in CONSTRUCTOR_KEYS if key in cfg}
    params = container(cfg.variant.params)
    spec = get_variant(cfg.variant.name)
    args, kwargs = constructor_kwargs(spec, {**values, "d_in": 1, "n_tokens": 1}, params)
    check_head_split(spec, args, kwargs, params)


def check_job(cfg: DictConfig) -> None:
    """A sweep's job's values together, after each value passed `check` alone: the schema's
    relations (num_kv_heads | num_heads) and the constructor's (num_heads | d_out)."""
    check_values(cfg)
    check_constructor(cfg)


def show_import_output(cfg: DictConfig) -> None:
    """What the run's variant and its plugin reference printed when their files were imported:
    discovery holds it back, so `--help` and runs of other variants stay quiet."""
    variant = get_variant(cfg.variant.name)
    reference = cfg.reference if cfg.reference != "auto" else variant.reference
    specs = [variant, *([get_variant(reference)] if reference else [])]
    for source in dict.fromkeys(spec.source for spec in specs):  # two variants of one file: its output once
        out, err = next(spec.output for spec in specs if spec.source == source)
        sys.stdout.write(out)
        sys.stderr.write(err)


def seeds(cfg: DictConfig) -> range:
    return range(cfg.seed, cfg.seed + cfg.n_seeds)


def _seed_phase(progress: Progress, seed: int, part: str) -> None:
    progress.phase(f"seed {seed}: {part}")


def compute_records(cfg: DictConfig, progress: Progress | None = None, stream_to: Path | None = None) -> list[Record]:
    """Every seed's record of a config `check` passed. With `stream_to` (a
    job folder) and several seeds, each record is written as soon as it is computed and then
    keeps only its reductions (diagnostics, findings, shapes): the sinks draw images from the
    first record that succeeded, so holding every seed's stages would only cost memory."""
    show_import_output(cfg)
    cap_process()
    progress = progress or Progress(cfg.n_seeds, enabled=False)
    if wants_model(cfg):
        return compute_model_records(model_request(cfg), phase=progress.phase,
                                     done=lambda record, index, n: _streamed_layer(record, index, n, stream_to))
    check_declared_inputs(cfg.batch, declared_n_tokens(cfg.inputs), OmegaConf.select(cfg.inputs, "d_in"), cfg.d_out)
    spec, given = job_spec(cfg), inputs_values(cfg)
    records: list[Record] = []
    for seed in seeds(cfg):
        progress.phase(f"seed {seed}: inputs")
        record, given, spec = _record_at_own_sizes(cfg, spec, given, seed, progress)
        if stream_to is not None and cfg.n_seeds > 1:
            record = written(record, record_dir(stream_to, record, cfg.n_seeds))
            record = without_stages(record) if any(r.ok for r in records) or not record.ok else spilled(record)
        records.append(record)
        progress.advance()
    return records


def _record_at_own_sizes(cfg: DictConfig, spec: JobSpec, given: dict[str, Any], seed: int,
                         progress: Progress) -> tuple[Record, dict[str, Any], JobSpec]:
    """One seed's record; a variant that runs only at a token count or an input width of its own is
    run again at it where the inputs' size is free (each size once: a count and a width both, at most),
    and the inputs' values and the job as the later seeds run them."""
    while True:  # ends: each at_own_* raises where its size was already the variant's own
        inputs = make_inputs(given, seed, cfg.batch)
        check_n_tokens(cfg, inputs.n_tokens)
        try:
            return compute_record(spec, seed, inputs, phase=partial(_seed_phase, progress, seed)), given, spec
        except TokensNeeded as needed:  # a count of the variant's own: run at it where the inputs' size is free
            given, spec = at_own_count(given, spec, needed)
        except WidthNeeded as needed:  # a width of its own: the whole comparison at it, the variant as asked
            given, spec = at_own_width(given, spec, needed)


def at_own_width(given: dict[str, Any], spec: JobSpec, needed: WidthNeeded) -> tuple[dict[str, Any], JobSpec]:
    """The inputs' values at the width the variant's projections take, the reference built at it
    (and at the width its queries make), the variant's class still built at the run's sizes (its own
    widths are what they make of it), and the job noting why: only inputs whose width is a size to
    choose (random ones); the user's embeddings are never cut or padded, so there the refusal stands."""
    if "d_in" not in given or given["d_in"] == needed.d_in or spec.variant_sizes is not None:
        raise needed
    asked = {"d_in": given["d_in"], "d_out": spec.d_out}
    why = str(needed).split("; ")[0]
    note = (f"ran at d_in={needed.d_in}, not inputs.d_in={given['d_in']}, the reference's heads {needed.d_out} wide in "
            f"all: {why}; the variant's class built at d_in={given['d_in']} as asked")
    values = {**spec.values, "d_out": needed.d_out}  # the reference's heads as wide as the variant's
    return ({**given, "d_in": needed.d_in},
            replace(spec, notes=(*spec.notes, note), values=values, d_out=needed.d_out, variant_sizes=asked))


def at_own_count(given: dict[str, Any], spec: JobSpec, needed: TokensNeeded) -> tuple[dict[str, Any], JobSpec]:
    """The inputs' values at the variant's own token count, and the job noting why: only inputs whose
    count is a size to choose (random ones); the user's tokens (a file, a text, rows) are never cut or
    padded, so there the refusal stands (docs/guide/variants.md)."""
    if "n_tokens" not in given or given["n_tokens"] == needed.n_tokens:
        raise needed
    note = (f"ran at n_tokens={needed.n_tokens}, not inputs.n_tokens={given['n_tokens']}: the variant runs only "
            f"at a count of its own ({needed})")
    return {**given, "n_tokens": needed.n_tokens}, replace(spec, notes=(*spec.notes, note))


def _streamed_layer(record: Record, index: int, n_layers: int, stream_to: Path | None) -> Record:
    """Several layers of a model: each record written as soon as it is made; the first keeps its
    stages, the others only the attention weights (on disk) for the sinks' head grids. Nowhere to
    write (the Python API without out_dir): every stage is kept, in memory while every layer's
    would take at most a quarter of the memory available (writing them costs as much as the
    model's forward at 1,024 tokens), else the later layers' on disk, memory-mapped, so that a
    model's every layer does not sit in memory at once."""
    if n_layers == 1:
        return record
    if stream_to is None:
        fits = n_layers * stage_bytes(record) <= available_bytes()[0] // 4
        return spilled(record) if index > 0 and not fits else record
    record = written(record, record_dir(stream_to, record, n_layers))
    return keeping_stages(record, ("weights",)) if index > 0 else record


def record_dir(job_dir: Path, record: Record, n_records: int) -> Path:
    """The job folder for one record; each seed's, or each layer's in a model, a folder of its own."""
    if n_records == 1:
        return job_dir
    if record.model is not None:
        return job_dir / LAYER_DIR.format(layer=record.model.layer_name)
    return job_dir / SEED_DIR.format(seed=record.seed)


def write_outputs(cfg: DictConfig, records: list[Record], job: JobInfo | Path, progress: Progress | None = None,
                  sinks: dict[str, Any] | None = None) -> list[Record]:
    """Every record (atomically, first), then every enabled sink in turn (`sinks`: as `check` built
    them); returns the records, each knowing its path."""
    job = job if isinstance(job, JobInfo) else JobInfo(Path(job))
    sinks = build_sinks(sink_settings(cfg)) if sinks is None else sinks
    progress = progress or Progress(len(records), enabled=False)
    progress.phase("records")
    unmark(job.dir)
    records = [written(r, record_dir(job.dir, r, len(records))) if r.path is None else r  # streamed ones were
               for r in records]
    for name, sink in sinks.items():
        if hasattr(sink, "write"):
            progress.phase(name)
            progress.clear()  # a sink may print; the bar comes back at the next phase
            try:
                sink.write(records, job)
            except UserError:
                raise
            except Exception as exc:  # its files may be partial (a full disk): the records say so
                error = f"sink {name}: {type(exc).__name__}: {exc}".splitlines()[0]
                raise SinkError(error, mark_failed(records, error)) from exc
    mark_done(job.dir, job.overrides)  # last: the job is done only when all of its outputs are
    return records


class SinkError(RuntimeError):
    """A sink that failed after the records were written; `paths`: the records, now marked failed."""

    def __init__(self, message: str, paths: list[str]) -> None:
        super().__init__(message)
        self.paths = paths


def mark_failed(records: list[Record], error: str) -> list[str]:
    """Rewrite each written record as failed with `error`. One that cannot be rewritten (the disk
    that failed the sink is full) is removed: its job then has no record, never an ok one beside a
    truncated file, and a resumed sweep runs it again."""
    paths = []
    for record in records:
        if record.path is None:
            continue
        try:
            # a finished record, not one being built: the job's sink failed after it was written
            write_record(replace(record, status="failed", error=error), record.path.parent)
        except OSError:
            record.path.unlink(missing_ok=True)
        paths.append(str(record.path))
    return paths


def run_job(cfg: DictConfig, job: JobInfo | Path | None, sinks: dict[str, Any] | None = None) -> list[Record]:
    """One job, the CLI's and `attnlab.run`'s: checked (unless `sinks` are given: the sweeper
    checked its values already and built them), every record computed, then written with every
    sink's files into `job`. `job` None (a notebook's run without out_dir): nothing is written,
    and the terminal summary, if switched on, is printed without the line naming its file."""
    sinks = check(cfg) if sinks is None else sinks
    if wants_training(cfg):  # a training run, through the sinks' write_training: no attention record to write
        info = job if isinstance(job, JobInfo) or job is None else JobInfo(Path(job))
        if info is not None and info.sweep_dir is not None:  # a failed record of an earlier attempt (its worker died)
            (info.dir / RECORD_FILE).unlink(missing_ok=True)
        training_job(training_request(cfg), None if info is None else info.dir, None if info is None else info.sweep_dir,
                     training_outputs(cfg, sinks, info))
        return []
    stream_to = None if job is None else Path(job.dir if isinstance(job, JobInfo) else job)
    if stream_to is not None:
        unmark(stream_to)
    with Progress(cfg.n_seeds, label="seeds", enabled=bool(cfg.log.get("progress"))) as progress:
        owner = os.getpid()
        records = compute_records(cfg, progress, stream_to=stream_to)
        if os.getpid() != owner:  # a module forked and its child came back here: only the parent reports
            os._exit(0)
        if job is not None:
            records = write_outputs(cfg, records, job, progress, sinks)
    if job is None and cfg.log.get("terminal"):
        from attnlab.sinks.terminal import print_record

        for record in records:
            print_record(record)
    return records


def training_outputs(cfg: DictConfig, sinks: dict[str, Any], job: JobInfo | None) -> Callable[[TrainingResult], None]:
    """A training run's way out: into a folder, training.json then every sink's `write_training`;
    with none (`attnlab.train` without out_dir), nothing written and the terminal's text printed
    if log.terminal is on, as a forward run's summary is."""
    if job is not None:
        return partial(write_training_run, sinks, job=job)
    return print_training if cfg.log.get("terminal") else lambda result: None


def job_work(cfg: DictConfig, job: JobInfo, *, multirun: bool, checked: bool) -> list[str]:
    """One job's work; returns its failed records' paths. In a sweep, a job whose records are in its
    folder already has only its outputs written from them (attnlab.app.job_records); a job that fails before its
    modules run (inputs that do not fit context_length, an inputs factory that raises) becomes a
    failed record in the job's folder, so the job has its row and the other jobs run; in a single
    run it is raised, for the CLI to report in one line. A sink that fails marks the records."""
    sinks = build_sinks(sink_settings(cfg)) if checked else None
    try:
        on_disk = records_on_disk(cfg, job.dir) if multirun else None  # a resumed job killed before its outputs
        records = write_outputs(cfg, on_disk, job, sinks=sinks) if on_disk else run_job(cfg, job, sinks)
    except SinkError as exc:  # after the records: they are marked failed already
        if not multirun:
            raise
        return exc.paths
    except Exception as exc:  # noqa: BLE001 - in a sweep, any error before the records is this job's row
        if not multirun:
            raise
        return [str(write_failure(cfg, job.dir, exc))]
    return [str(r.path) for r in records if not r.ok]


def write_failure_line(cfg: DictConfig, job_dir: Path, cause: str) -> str:
    """The failed record of a job whose process timed out or died, its cause printed as the
    terminal sink prints a module's exception (no sink ran for it: its process is gone)."""
    path = write_failure(cfg, job_dir, UserError(cause))
    if cfg.log.get("terminal"):
        print(f"FAILED: {cause}")
    return str(path)


def write_failure(cfg: DictConfig, job_dir: Path, error: BaseException) -> Path:
    """A failed record for a job that could not run, with the one-line error."""
    config = container(cfg, resolve=False, enum_to_str=True)
    cause = str(error) if isinstance(error, UserError) else f"{type(error).__name__}: {error}"
    setup = Setup(variant=str(OmegaConf.select(cfg, "variant.name", default="?")),
                  seed=int(OmegaConf.select(cfg, "seed", default=0)), config=config)
    record = record_of(setup, error=cause.splitlines()[0] if cause else type(error).__name__)
    return write_record(record, job_dir)


__all__: Sequence[str] = ["check", "check_constructor", "check_job", "compute_records", "job_work", "run_job", "training_outputs", "write_failure", "write_outputs"]
