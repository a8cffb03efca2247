"""The command line: `python -m attnlab [overrides]`, `attnlab compare PATH...`.

Hydra runs the app; this wrapper turns user mistakes (a bad value, an unknown variant, an
unreadable inputs file) into one line on stderr and exit code 2, with no traceback, and makes
the exit code non-zero when any job's record failed.
"""

from __future__ import annotations

import atexit
import gc
import os
import sys
import threading
from pathlib import Path
from typing import NoReturn

import hydra
from hydra.core.hydra_config import HydraConfig
from hydra.errors import HydraException
from hydra.types import RunMode
from omegaconf import DictConfig
from omegaconf.errors import OmegaConfBaseException

from attnlab.config import config_dir, register_configs, user_overrides
from attnlab.errors import UserError
from attnlab.registry import discover

failed_jobs: list[str] = []  # records that failed in this process (single runs, the basic launcher)
user_errors: list[UserError] = []
open_sweeps: list[Path] = []  # sweeps started in this process whose end Hydra has not reported


def task(cfg: DictConfig) -> None:
    from attnlab.job import run_job

    hydra_cfg = HydraConfig.get()
    try:
        records = run_job(cfg, Path(hydra_cfg.runtime.output_dir))
    except UserError as exc:
        if hydra_cfg.mode == RunMode.MULTIRUN:
            raise  # Hydra names the job's overrides; the wrapper then prints the reason
        user_errors.append(exc)  # a single run: reported by the wrapper as one line
        return
    failed_jobs.extend(str(r.path) for r in records if not r.ok)


def one_line(exc: BaseException) -> str:
    """Hydra and OmegaConf spread an error over several lines; the user gets one."""
    if isinstance(exc, UserError):
        return str(exc)
    cause = exc.__cause__ if isinstance(exc.__cause__, OmegaConfBaseException) else None
    if cause is not None and getattr(cause, "full_key", None):
        reason = str(cause).splitlines()[0].strip()
        return f"{cause.full_key}: {reason} ({str(exc).splitlines()[0].strip()})"
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    missing = [i for i, line in enumerate(lines) if "Could not find" in line]
    if missing:
        head, options = lines[missing[0]], lines[missing[0] + 1 :]
        options = options[: next((i for i, o in enumerate(options) if o.startswith("Config search path")), None)]
        allowed = f"; {options[0].rstrip(':')}: {', '.join(options[1:])}" if options else ""
        return head.replace("In 'config': ", "") + allowed
    return "; ".join(lines[:2]) or type(exc).__name__


def _check_variant_overrides(args: list[str]) -> None:
    """An unknown variant name fails here, with the closest match, before Hydra starts any job."""
    registry = discover()
    for arg in args:
        key, _, value = arg.partition("=")
        if key.lstrip("+~") == "variant" and value and "(" not in value:
            for name in value.split(","):
                registry.get(name.strip())


def _finish_open_sweeps() -> None:
    """Hydra skips on_multirun_end when a job raised or on Ctrl-C: write the sweep's tables here."""
    if open_sweeps:
        from attnlab.aggregate import find_record_files
        from attnlab.sweep import finish

        for folder in open_sweeps:
            if find_record_files([folder]):  # a value that failed validation ran no job: no tables
                finish(folder)
        open_sweeps.clear()


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else list(argv)
    if args and args[0] == "compare":
        from attnlab.compare import main as compare_main

        return compare_main(args[1:])
    os.environ["HYDRA_FULL_ERROR"] = "1"  # errors reach this wrapper instead of Hydra's printer
    registry = discover()
    for warning in registry.warnings:
        print(f"attnlab: warning: {warning}", file=sys.stderr)
    register_configs(registry)
    # What start-up left alive (torch's ~200k objects) leaves the collector's sight: every full
    # collection in a sweep walked it all, ~0.2 s each, for nothing that would ever be freed.
    gc.freeze()
    failed_jobs.clear()
    user_errors.clear()
    open_sweeps.clear()
    try:
        _check_variant_overrides(args)
        sys.argv = [sys.argv[0], *user_overrides(args)]
        hydra.main(config_path=str(config_dir()), config_name="config", version_base="1.3")(task)()
        if user_errors:
            raise user_errors[0]
    except KeyboardInterrupt:
        _finish_open_sweeps()
        print("attnlab: interrupted; finished jobs' records are kept (rebuild tables: attnlab compare PATH)", file=sys.stderr)
        return 130
    except Exception as exc:  # noqa: BLE001 - every error becomes one line; HYDRA_FULL_ERROR=1 shows the trace
        if os.environ.get("ATTNLAB_TRACEBACK"):
            raise
        _finish_open_sweeps()
        print(f"attnlab: error: {one_line(exc)}", file=sys.stderr)
        return 2 if isinstance(exc, (UserError, HydraException, OmegaConfBaseException)) else 1
    if failed_jobs:
        print(f"attnlab: {len(failed_jobs)} failed record(s): {', '.join(failed_jobs)}", file=sys.stderr)
        return 1
    return 0


def exit_fast(code: int) -> NoReturn:
    """Exit with `code` once everything is written, without tearing the interpreter down.

    Why: once torch is imported, Python's finalization (freeing every module's objects one by
    one) takes about a second here: a quarter of a single run, three jobs' worth of a sweep.
    Nothing is pending by then (records, tables and event files are closed), and the atexit
    handlers still run, logging's flush among them. While any other thread is alive the normal
    exit runs instead, so no one's work is cut short.
    """
    if threading.active_count() > 1:
        sys.exit(code)
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except OSError:  # a reader that went away (`attnlab ... | head`) is not an error of the run
            pass
    os._exit(code)


def entry() -> NoReturn:
    """The `attnlab` command and `python -m attnlab`."""
    exit_fast(main())
