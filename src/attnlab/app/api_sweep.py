"""`attnlab.sweep(variant=[...], seed=[...], **grid)`: a sweep from Python, job by job through `attnlab.run`.

Every combination of the listed values is one job, in the order the CLI's `-m` runs them (the
first key outermost); with `out_dir` each job writes its records into `out_dir/<job number>`, as
a CLI sweep does under its sweep folder, and the sweep's end writes what a CLI sweep's does
(comparison.csv, .md and .html, TensorBoard's curves and sessions), so `attnlab compare out_dir`
rebuilds the same table and `tensorboard --logdir out_dir` opens on its shared runs.
The table returned is the one `attnlab compare` builds (attnlab.reporting.aggregate.Report).
"""

from __future__ import annotations

import itertools
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from omegaconf import DictConfig

from attnlab.app.api import Result, prepared, run_prepared, session_name
from attnlab.app.resolvers import job_dirname
from attnlab.app.sweep import write_sweep_outputs
from attnlab.errors import UserError
from attnlab.reporting.aggregate import Report
from attnlab.sinks.base import JobInfo

if TYPE_CHECKING:
    import pandas as pd


@dataclass
class SweepResult:
    """Every job's results, in job order, and the comparison table of their records."""

    results: list[Result]
    table: pd.DataFrame

    def __repr__(self) -> str:
        jobs = "".join(f"  {result!r},\n" for result in self.results)
        return f"SweepResult({len(self.results)} results; .table: {len(self.table)} rows\n{jobs})"

    def _repr_html_(self) -> str:
        """A notebook's view of a sweep: its comparison table, every job's findings in a row."""
        from attnlab.sinks.html import table_html
        from attnlab.sinks.inline_html import wrapped

        return wrapped(f"<p>{len(self.results)} results</p>{table_html(self.table, index=False)}")


def sweep(variant: Any = "reference", seed: Any = 123, *, overrides: Iterable[str] = (),
          out_dir: str | Path | None = None, progress: bool = True, **grid: Any) -> SweepResult:
    """Run every combination of the listed values (`variant`, `seed` and any keyword: a list
    sweeps, a single value is fixed); returns the results and the comparison table."""
    axes = {"variant": variant, "seed": seed, **grid}
    listed = {key: list(values) for key, values in axes.items() if isinstance(values, (list, tuple, range))}
    for key, values in listed.items():
        if not values:
            raise UserError(f"{key}=[]: a sweep needs at least one value of {key}")
    fixed = {key: value for key, value in axes.items() if key not in listed}
    jobs = [dict(zip(listed, values)) for values in itertools.product(*listed.values())]
    checked = [_checked({**fixed, **job}, overrides) for job in jobs]
    refused = list(dict.fromkeys(line for found in checked if isinstance(found, list) for line in found))
    if refused:  # every bad job's line, before the first job runs: nothing half done
        raise UserError("\n".join(refused))
    results: list[Result] = []
    for number, (job, found_job) in enumerate(zip(jobs, checked)):
        assert isinstance(found_job, tuple)  # a refused job raised above
        cfg, words, sinks = found_job
        if progress:
            _show(number, len(jobs), job)
        folder = None if out_dir is None else JobInfo(Path(out_dir) / _job_dir(number, job), Path(out_dir), number)
        found = run_prepared(cfg, words, folder, sinks)
        results += found if isinstance(found, list) else [found]
    if progress:
        _show(len(jobs), len(jobs), {})
    if out_dir is None:
        return SweepResult(results, Report([r.record for r in results]).jobs)
    report, _problems = write_sweep_outputs(Path(out_dir), cfg)  # a CLI sweep's end: read back from disk
    return SweepResult(results, report.jobs)


def _checked(arguments: dict[str, Any], overrides: Iterable[str]) -> tuple[DictConfig, list[str], dict[str, Any]] | list[str]:
    """A job's config, overrides and sinks, checked as the CLI's sweeper checks each job (each value
    alone, then the job's values together), so running it checks nothing again; or what a single
    run of these arguments would refuse before any work, a line each."""
    from attnlab.app.run_job import check, check_job

    try:
        cfg, words = prepared(**arguments, overrides=overrides)
        sinks = check(cfg)
        check_job(cfg)
    except UserError as exc:
        return str(exc).splitlines()
    return cfg, words, sinks


def _job_dir(number: int, job: dict[str, Any]) -> str:
    """`3-seed=2,variant=unscaled`, as a CLI sweep names its jobs' folders (Hydra's override_dirname,
    made safe as attnlab.app.resolvers.job_dirname makes it); a block given as a dict by its keys
    (`intervene=ablate_head,intervene.head=0`), a function by its name."""
    words = []
    for key, value in sorted(job.items()):
        if isinstance(value, Mapping):
            words += [f"{key}={_shown(inner)}" if name == "name" else f"{key}.{name}={_shown(inner)}"
                      for name, inner in value.items()]
        else:
            words.append(f"{key}={session_name(value) if key in ('variant', 'reference') else _shown(value)}")
    return f"{number}-" + job_dirname(",".join(words))


def _shown(value: Any) -> Any:
    return getattr(value, "__name__", value) if callable(value) else value


def _show(done: int, total: int, job: dict[str, Any]) -> None:
    """One line, redrawn in place (a notebook's output and a terminal both honour the carriage
    return), on stdout: Jupyter paints stderr as a pink error block."""
    width = 20
    bar = "#" * (width * done // max(total, 1))
    what = " ".join(f"{k}={getattr(v, '__name__', v)}" for k, v in job.items())
    sys.stdout.write(f"\rattnlab.sweep [{bar.ljust(width)}] {done}/{total} {what}".ljust(79)
                     + ("\n" if done == total else ""))
    sys.stdout.flush()
