"""The sink interface: what turns records into outputs. The terminal, the tables, TensorBoard and
the HTML report are sinks; so is any class a user names in a `conf/sink/NAME.yaml`.

Each sink is a config in the Hydra group `sink` with a `_target_`; the app reads the enabled ones
as plain data once (`SinkSettings`, attnlab.app.job_settings.sink_settings) and each is built by
`attnlab.configured.build` when `log.NAME` is true,
and has up to four methods, one per kind of result (a missing one is simply not called):

- `write(records, job)`: after a job wrote its records. `records` are the job's seeds (one for
  a single run or a sweep job), in seed order; `job` is a `JobInfo`.
- `write_sweep(report, folder)`: at the end of a sweep (also an interrupted one), with every
  record under the sweep folder (`attnlab.reporting.aggregate.Report`: `.records`, `.jobs`, ...).
- `write_training(result, job)`: after a training job (`attnlab.training.job.TrainingResult`:
  `.verdict`, `.rows`, `.seeds`, `.as_dict()`).
- `write_training_sweep(sweep, folder)`: at the end of a sweep of training jobs, its seeds pooled
  per variant (`attnlab.training.sweep_table.TrainingSweep`: `.text`, `.rows`, `.verdicts`).

A sink reads results and never recomputes attention; record.json (training.json) is written
before any sink runs, so a sink that fails loses nothing. Sinks run in the order of the `sink` group, the
terminal last, so what it points to is already on disk.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from attnlab.errors import UserError

if TYPE_CHECKING:
    from attnlab.record import Record
    from attnlab.reporting.aggregate import Report
    from attnlab.training.job import TrainingResult
    from attnlab.training.sweep_table import TrainingSweep


REPORT_FILE = "report.html"  # a single run's page in its job folder (the html sink writes, the terminal names it)


@dataclass(frozen=True)
class JobInfo:
    """Where a job writes and what it is, for sinks (and trackers that group runs by sweep)."""

    dir: Path  # the job's folder (record.json, comparison.csv, the TensorBoard run, ...); the config is in the records
    sweep_dir: Path | None = None  # the sweep's folder, when the job is one of a sweep
    num: int | None = None  # the job's number in its sweep
    overrides: Sequence[str] = ()  # the job's own command-line overrides (what a sweep varies)


class Sink(Protocol):
    def write(self, records: Sequence[Record], job: JobInfo) -> None: ...

    def write_sweep(self, report: Report, folder: Path) -> None: ...

    def write_training(self, result: TrainingResult, job: JobInfo) -> None: ...

    def write_training_sweep(self, sweep: TrainingSweep, folder: Path) -> None: ...


@dataclass(frozen=True)
class SinkSettings:
    """The `log.*` switches and each enabled sink's config (`_target_` and options), as plain data."""

    log: Mapping[str, Any]
    configs: Mapping[str, Mapping[str, Any]]  # in the order the sinks run (the terminal last)


def enabled_sinks(sink: Mapping[str, Any], log: Mapping[str, Any]) -> list[str]:
    """The names of the sinks `log.NAME` switches on, in the order they run (the terminal last)."""
    names = [name for name in sink if log.get(name)]
    return sorted(names, key=lambda name: name == "terminal")


def build_sinks(settings: SinkSettings) -> dict[str, Sink]:
    """Every enabled sink, built from its config; a sink that cannot be built is a one-line error."""
    from attnlab.configured import build

    sinks = {}
    for name, values in settings.configs.items():
        try:
            sinks[name] = build(values)
        except UserError:
            raise
        except Exception as exc:  # noqa: BLE001 - a sink's constructor, yours included: one line
            raise unbuildable(name, values.get("_target_"), exc) from None
    return sinks


def unbuildable(name: str, target: Any, exc: Exception) -> UserError:
    """The one line for a sink that cannot be built (or whose config cannot be read)."""
    reason = (str(exc) or type(exc).__name__).splitlines()[0]
    return UserError(f"sink.{name}: cannot build {target}: {reason}")


__all__ = ["REPORT_FILE", "JobInfo", "Sink", "SinkSettings", "build_sinks", "enabled_sinks"]
