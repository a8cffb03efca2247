"""attnlab's sweeper: Hydra's basic sweep, with every value checked before the first job.

A sweep is the cartesian product of the overrides (`a=1,2 b=x,y`, `range(...)`, `glob(...)`),
plus `params` and `max_batch_size`, as Hydra's basic sweeper does. Three things differ:

- **Every value is checked before any job runs, and before the sweep folder exists.** The
  basic sweeper composes every job (Hydra's largest cost per job) and checks only what
  composition checks, so a range error (`d_out=2,0`) ran job 0 and failed at job 1. Here each
  config-group choice (`variant=unscaled`, `inputs=random`) composes one job that contains it,
  and each distinct value (`seed=7`, `d_out=0`) is applied to a copy of those composed configs
  (about a millisecond each); every result goes through the app's `check` function. A value
  that cannot be applied to a copy is checked by composing a job that contains it, so Hydra's
  own error is the one reported. A bad sweep leaves no folder behind.
- **A config-group choice is composed once per sweep, not once per job.** The launcher gets a
  `HydraContext` whose loader (`_loader.SweepConfigLoader`) keeps each combination of group
  lines composed (the checks above fill it) and applies a job's value lines (`seed=3`) to a
  copy, giving the config Hydra would compose; any other line composes the job in full.
- **The end of the sweep is the app's `finish` function**, called once every job returned (or
  when the launch was interrupted): Hydra skips its callbacks' `on_multirun_end` when a job
  raised or on Ctrl-C, and a callback cannot change the run's outcome, a sweeper can.

Public Hydra API only (the `Sweeper` and `ConfigLoader` interfaces, `HydraContext`, the
override parser, `Plugins`). The app registers this class with `Plugins.instance().register(...)`,
so it works in a process where another Hydra app already ran (Hydra scans for plugins once per
process); as a `hydra_plugins` namespace package, Hydra's own scan finds it too. Hydra imports
every plugin module it finds, in every app, so this module imports only Hydra and OmegaConf:
`check`, `check_job` and `finish` come from `attnlab.app.sweep_hooks`, imported when a sweep runs.
The config's `check`, `check_job` and `finish` switch them (the app reads them: a job attnlab's
sweeper checked is not checked again, a sweep it finishes is not finished by the callback).
"""

from __future__ import annotations

import copy
import itertools
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

from hydra.core.config_store import ConfigStore
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.override_parser.types import Override
from hydra.core.plugins import Plugins
from hydra.core.utils import JobReturn, JobStatus
from hydra.errors import HydraException
from hydra.plugins.launcher import Launcher
from hydra.plugins.sweeper import Sweeper
from hydra.types import HydraContext, TaskFunction
from omegaconf import DictConfig

from hydra_plugins.attnlab_sweeper._loader import SweepConfigLoader, apply_override
from hydra_plugins.attnlab_sweeper.folder import check_reuse, job_outcomes, locked, runs_of, write_multirun_yaml


def cartesian(overrides: Sequence[Override]) -> list[list[str]]:
    """Every job's override lines, in Hydra's order (the last key varies fastest)."""
    choices: dict[str, list[str]] = {}
    for override in overrides:
        key = override.get_key_element()
        if not override.is_sweep_override():
            choices[key] = [f"{key}={override.get_value_element_as_str()}"]
        elif override.is_discrete_sweep():
            choices[key] = [f"{key}={value}" for value in override.sweep_string_iterator()]
        else:
            assert override.value_type is not None  # a sweep override has its kind
            raise HydraException(f"AttnlabSweeper does not support sweep type : {override.value_type.name}")
    return [list(job) for job in itertools.product(*choices.values())]


def covering_jobs(jobs: Sequence[Sequence[str]], is_group: Callable[[str], bool]) -> list[Sequence[str]]:
    """The jobs, in order, that bring a config-group choice not seen before: composing them
    composes every group choice of the sweep once."""
    seen: set[str] = set()
    chosen = []
    for job in jobs:
        new = [line for line in job if is_group(line) and line not in seen]
        seen.update(new)
        if new:
            chosen.append(job)
    return chosen


def apply_value(config: DictConfig, override: Override) -> DictConfig:
    """A copy of `config` with one value override applied as composition applies it: a plain
    override must name an existing key, `+` adds a new one, `++` either. Raises when Hydra's
    composition would (or when unsure, e.g. a deletion): the caller then composes a job."""
    config = copy.deepcopy(config)
    apply_override(config, override)
    return config


class AttnlabSweeper(Sweeper):
    def __init__(self, max_batch_size: int | None = None, params: dict[str, str] | None = None,
                 check: bool = False, check_job: bool = False, finish: bool = False) -> None:
        super().__init__()
        self.max_batch_size = max_batch_size
        self.params = dict(params or {})
        self.check, self.check_job, self.finish = check, check_job, finish
        self.hydra_context: HydraContext | None = None
        self.config: DictConfig | None = None
        self.launcher: Launcher | None = None

    def setup(self, *, hydra_context: HydraContext, task_function: TaskFunction, config: DictConfig) -> None:
        # the launcher composes every job through the caching loader, which validation fills first
        loader = SweepConfigLoader(hydra_context.config_loader)
        self.hydra_context = HydraContext(config_loader=loader, callbacks=hydra_context.callbacks)
        self.config = config
        self.launcher = Plugins.instance().instantiate_launcher(
            hydra_context=self.hydra_context, task_function=task_function, config=config)

    def sweep(self, arguments: list[str]) -> Any:
        assert self.config is not None and self.launcher is not None and self.hydra_context is not None
        parser = OverridesParser.create(config_loader=self.hydra_context.config_loader)
        lines = [f"{key}={value}" for key, value in self.params.items()] + list(arguments)
        jobs = cartesian(parser.parse_overrides(lines))
        self.validate(jobs, parser)
        sweep_dir = Path(str(self.config.hydra.sweep.dir))  # resolving it claims the folder: only now
        overrides = [str(line) for line in self.config.hydra.overrides.task]
        with locked(sweep_dir, " ".join(overrides)):
            resuming = check_reuse(sweep_dir, overrides, jobs, [str(key) for key in self.config.keys()])
            if isinstance(resuming, str):  # recognised from its jobs' folders
                say(resuming)
            write_multirun_yaml(sweep_dir, self.config)
            pending = list(range(len(jobs)))
            if resuming:
                unfinished: dict[tuple[str, ...], str] = {}
                done = job_outcomes(sweep_dir, unfinished)
                pending = [i for i in pending if not done.get(tuple(jobs[i]))]
                say(f"resuming the sweep in {sweep_dir}: {len(jobs) - len(pending)} of {len(jobs)} job(s) are done; "
                    f"running the other {len(pending)}")
                for i in pending:
                    if tuple(jobs[i]) in unfinished:
                        say(f"job #{i} again: {unfinished[tuple(jobs[i])]}")
            return self.run(jobs, pending, sweep_dir)

    def run(self, jobs: Sequence[Sequence[str]], pending: list[int], sweep_dir: Path) -> Any:
        """Launch the `pending` jobs (by index, numbered as in the whole sweep), then finish it.
        A launcher that fails (a joblib worker killed) costs the jobs it was running: the jobs
        still without a record are launched once more, and those still missing are listed."""
        finish = app_hooks().finish if self.finish else None
        returns: list[Sequence[JobReturn]] = []
        try:
            failure = self.launch(jobs, pending, returns)
            if failure is not None:
                done = job_outcomes(sweep_dir)
                again = [i for i in pending if tuple(jobs[i]) not in done]
                say(f"the launcher failed ({one_line(failure)}); launching the {len(again)} job(s) without a record again")
                self.launch(jobs, again, returns)
        except BaseException:
            if finish is not None:
                finish(self.config, complete=False)
            raise
        done = job_outcomes(sweep_dir)
        missing = [f"#{i} {' '.join(jobs[i])}" for i in pending if tuple(jobs[i]) not in done]
        raised = [job for batch in returns for job in batch if job.status == JobStatus.FAILED]
        if finish is not None:
            finish(self.config, complete=not raised, missing=missing)
        for job in raised:
            _ = job.return_value  # re-raises the job's exception, as the basic sweeper does
        return returns

    def launch(self, jobs: Sequence[Sequence[str]], indices: list[int],
               returns: list[Sequence[JobReturn]]) -> Exception | None:
        """Launch the jobs at `indices` in runs of consecutive numbers (a job keeps its number and so
        its folder); the launcher's error, if one failed (the rest of the runs are not launched)."""
        assert self.launcher is not None  # setup's
        size = self.max_batch_size if self.max_batch_size and self.max_batch_size > 0 else max(len(jobs), 1)
        for first, end in runs_of(indices):
            for start in range(first, end, size):
                try:
                    returns.append(self.launcher.launch(jobs[start:min(start + size, end)], initial_job_idx=start))
                except Exception as exc:  # noqa: BLE001 - reported, and the jobs it cost launched again
                    return exc
        return None

    def validate(self, jobs: Sequence[Sequence[str]], parser: OverridesParser) -> None:
        """Check every value of the sweep, then every job's combination of them (see the module's
        docstring). Every distinct error is collected: one raises as itself, several as an
        ExceptionGroup, so the user sees them all at once."""
        assert self.config is not None and self.hydra_context is not None
        master, loader = self.config, self.hydra_context.config_loader
        assert isinstance(loader, SweepConfigLoader)  # setup's
        check = app_hooks().check if self.check else (lambda config: None)
        check_job = app_hooks().check_job if self.check_job else (lambda config: None)
        errors: dict[str, Exception] = {}
        groups: dict[str, bool] = {}

        def is_group(line: str) -> bool:
            if line not in groups:
                groups[line] = loader.is_group(master, parser.parse_override(line)) is not False
            return groups[line]

        def compose(job: Sequence[str]) -> DictConfig:
            return loader.load_sweep_config(master_config=master, sweep_overrides=list(job))

        def attempt(fn: Callable[..., Any], *args: Any) -> Any:
            try:
                return fn(*args)
            except Exception as exc:  # noqa: BLE001 - collected and raised together below
                errors.setdefault(str(exc), exc)
                return None

        contexts = {tuple(job): attempt(compose, job) for job in covering_jobs(jobs, is_group)} or {(): master}
        contexts = {lines: config for lines, config in contexts.items() if config is not None}
        for config in contexts.values():
            attempt(check, config)
        values = list(dict.fromkeys(line for job in jobs for line in job if not is_group(line)))
        for line in values:
            override = parser.parse_override(line)
            for context in contexts.values():
                try:
                    config = apply_value(context, override)
                except Exception:  # noqa: BLE001 - composing a job with it raises the error to report
                    config = attempt(compose, next(job for job in jobs if line in job))
                if config is not None:
                    attempt(check, config)
        if not errors:  # each value passed alone: now each job's values together (num_kv_heads | num_heads)
            # one copy per composed config: every job of a sweep sets the same keys, each in place
            copies = {id(config): copy.deepcopy(config) for config in contexts.values()}
            for job in jobs:
                config = copies[id(closest(contexts, job))]
                for line in (v for v in job if not is_group(v)):
                    attempt(apply_override, config, parser.parse_override(line))
                attempt(check_job, config)
        if len(errors) == 1:
            raise next(iter(errors.values()))
        if errors:
            raise ExceptionGroup(f"{len(errors)} bad values in the sweep", list(errors.values()))


def app_hooks() -> ModuleType:
    """attnlab's functions the sweeper calls, imported when a sweep runs (see the module's docstring)."""
    from attnlab.app import sweep_hooks

    return sweep_hooks


def say(line: str) -> None:
    print(f"attnlab: {line}", file=sys.stderr, flush=True)


def one_line(exc: BaseException) -> str:
    """The error's type and first sentence."""
    return f"{type(exc).__name__}: {(str(exc).strip().splitlines() or [''])[0].split('. ')[0][:200]}"


def closest(contexts: dict[tuple[str, ...], DictConfig], job: Sequence[str]) -> DictConfig:
    """The composed config sharing most config-group choices with `job` (the values checked
    together are the top-level keys and the inputs')."""
    return max(contexts.items(), key=lambda item: len(set(item[0]) & set(job)))[1]


# A plain mapping, not a dataclass: a structured config would carry this module's class into every
# pickled job config, and a submitit or SLURM worker unpickles those before it imports the app.
ConfigStore.instance().store(
    group="hydra/sweeper",
    name="attnlab",
    node={
        "_target_": f"{__name__}.AttnlabSweeper",
        "max_batch_size": None,
        "params": None,
        "check": True,  # sweep_hooks.check(config): raises on a bad value
        "check_job": True,  # sweep_hooks.check_job(config): every job's values together, their relations
        "finish": True,  # sweep_hooks.finish(config, complete, missing): tables, summary, outcome
    },
    provider="attnlab",
)
