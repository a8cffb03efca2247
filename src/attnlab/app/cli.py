"""The command line: `python -m attnlab [overrides]`, `attnlab compare PATH...`, `attnlab --version`.

Hydra runs the app; this wrapper turns user mistakes (a bad value, an unknown key or variant,
an unreadable inputs file) into one line on stderr and exit code 2, with no traceback, and makes
the exit code non-zero when a record failed. What the jobs report comes back by value: a single
run's task is a closure over this invocation's outcome, and a sweep's outcome is raised by the
sweep's end (`attnlab.app.sweep.finish`, called by attnlab's sweeper) as `FailedRecords`.
"""

from __future__ import annotations

import atexit
import contextlib
import gc
import io
import os
import shutil
import signal
import sys
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, NoReturn, cast

import hydra
from hydra.core.hydra_config import HydraConfig
from hydra.errors import HydraException, MissingConfigException, OverrideParseException
from omegaconf import DictConfig
from omegaconf.errors import ConfigAttributeError, ConfigKeyError, OmegaConfBaseException

from attnlab.app.check_first import refusals_raised
from attnlab.app.config_checks import check_given, closest_key
from attnlab.app.config_paths import config_dir, group_options
from attnlab.app.help_cache import HELP_ARGS, keep_help
from attnlab.app.overrides import user_overrides
from attnlab.errors import FailedRecords, UserError
from attnlab.printable import escaped


def one_line(exc: BaseException, args: Sequence[str] = ()) -> str:
    """Hydra and OmegaConf spread an error over several lines; the user gets one, built from the
    exceptions' own fields (the key, the missing option, the reason), not from their text."""
    if isinstance(exc, (UserError, FailedRecords)):
        return str(exc)
    if isinstance(exc, MissingConfigException) and exc.missing_cfg_file:
        group = exc.missing_cfg_file.rpartition("/")[0]
        options = f"; Available options in '{group}': {', '.join(exc.options)}" if exc.options else ""
        return f"Could not find '{exc.missing_cfg_file}'{options}"
    if isinstance(exc, OverrideParseException):  # characters Hydra's grammar reserves: quoting is the way out
        key, _, value = exc.override.partition("=")
        return f"{exc.override}: Hydra's grammar cannot read this value unquoted; quote it: '{key}=\"{value}\"'"
    cause = exc.__cause__ if isinstance(exc.__cause__, OmegaConfBaseException) else exc
    full_key: str | None = getattr(cause, "full_key", None)  # set only on an error OmegaConf formatted
    if isinstance(cause, OmegaConfBaseException) and full_key:
        reason = (cause.msg or str(cause)).splitlines()[0].strip()
        if isinstance(cause, (ConfigAttributeError, ConfigKeyError)):  # an unknown key: name the closest known one
            return closest_key(full_key, args)
        context = str(exc).splitlines()[0].strip() if cause is not exc else ""
        return f"{full_key}: {reason}" + (f" ({context})" if context else "")
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    ambiguous = lines[:1] and lines[0].startswith("Ambiguous value")  # a comma: Hydra's three ways out, all kept
    return "; ".join(lines[:4] if ambiguous else lines[:2]) or type(exc).__name__


def check_group_overrides(args: list[str]) -> None:
    """What Hydra would refuse after making the run's folder, or with a traceback, fails here in
    one line: an unknown variant (`variant=` or `variant.name=`, which names the folder), with the
    closest match, and a config-group choice that is a number or a bool (`inputs=5`)."""
    from attnlab.modules.registry import discover
    from attnlab.training.counterparts import MODEL_CHANGES

    registry = discover()
    for arg in args:
        key, _, value = arg.partition("=")
        key = key.lstrip("+~")
        if not value or "(" in value:
            continue
        for name in (v.strip() for v in value.split(",")):
            if key in ("variant", "variant.name"):
                if name not in MODEL_CHANGES:  # training's changes of the model: no class to find
                    registry.get(name)
            elif key in GROUPS and _scalar(name):
                raise UserError(f"{key}={name}: {_group_allowed(key)}")


GROUPS = ("inputs", "experiment", "sink")  # the config groups a user names on the command line


def _group_allowed(key: str) -> str:
    if key == "sink":
        return "sinks are switched by log.NAME=true|false and set by sink.NAME.KEY=VALUE, not chosen by sink="
    return "allowed are " + ", ".join(sum(group_options(key), []))


def _scalar(value: str) -> bool:
    """A value Hydra parses as a number, bool or null, never as a config's name."""
    try:
        float(value)
        return True
    except ValueError:
        return value.lower() in ("true", "false", "null")


def _remove_if_only_hydras(folder: Path) -> None:
    """A run refused before any work leaves nothing behind: the folder Hydra made for it, if it
    holds only Hydra's own files (.hydra/, the empty log), is removed, and so are the folders
    above it that are left empty, up to the working folder (runs/<date>/); anything else is kept."""
    hydras = {".hydra", "attnlab.log"}
    if not folder.is_dir() or not {p.name for p in folder.iterdir()} <= hydras:
        return
    shutil.rmtree(folder, ignore_errors=True)
    here, folder = Path.cwd().resolve(), folder.resolve().parent
    while folder != here and here in folder.parents and not any(folder.iterdir()):
        folder.rmdir()
        folder = folder.parent


REFUSALS = (UserError, HydraException, OmegaConfBaseException)  # a request refused before any work: exit 2
INTERRUPTED_EXIT = 130  # 128 + SIGINT, as a shell reports Ctrl-C
TERMINATED_EXIT = 143  # 128 + SIGTERM
THREAD_GRACE_S = 2.0  # how long a thread left running after the records may take to end by itself


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else list(argv)
    if args and args[0] == "compare":
        from attnlab.app.compare import main as compare_main

        return compare_main(args[1:])
    os.environ["HYDRA_FULL_ERROR"] = "1"  # errors reach this wrapper instead of Hydra's printer
    if not any(arg.startswith("-") for arg in args):  # a single run: its own bad values before the plugins and torch
        try:
            check_given(args)
        except UserError as exc:
            print(f"attnlab: error: {escaped(str(exc))}", file=sys.stderr)
            return 2
    from attnlab.app.config_store import register_configs  # imports every plugin, and torch
    from attnlab.modules.registry import discover

    registry = discover()
    for warning in registry.warnings:
        print(f"attnlab: warning: {escaped(warning)}", file=sys.stderr)
    register_configs(registry, full_help=bool({"--help", "-h"} & set(args)))
    # What start-up left alive (torch's objects) leaves the collector's sight: every full
    # collection in a sweep walked it all, for nothing that would ever be freed.
    gc.freeze()
    failed: list[str] = []  # this invocation's failed records (single runs; sweeps raise FailedRecords)
    errors: list[Exception] = []  # a single run's error, raised once Hydra is done

    def task(cfg: DictConfig) -> list[str]:
        """One job; returns its failed records' paths (Hydra hands them to the sweep's callback)."""
        from attnlab.app.job_task import run_task

        hydra_cfg = cast(DictConfig, HydraConfig.get())  # a DictConfig at run time, typed as the dataclass it is made from
        try:
            job_failed = run_task(cfg, hydra_cfg)
        except UserError as exc:  # a single run's: raising would make Hydra print "Error executing job" first
            errors.append(exc)
            _remove_if_only_hydras(Path(hydra_cfg.runtime.output_dir))
            return []
        except Exception as exc:  # noqa: BLE001 - a write that failed (a full disk): one line, not Hydra's two
            if os.environ.get("ATTNLAB_TRACEBACK"):
                raise
            if hydra_cfg.mode.name != "MULTIRUN":
                errors.append(exc)
                return []
            # a sweep's job that could not even write its failed record: named here, listed as without a record
            print(f"attnlab: error: job {hydra_cfg.job.get('num')}: {escaped(one_line(exc))}", file=sys.stderr)
            return [str(hydra_cfg.runtime.output_dir)]
        failed.extend(job_failed)
        return job_failed

    terminated = on_sigterm_as_ctrl_c()
    try:
        check_group_overrides(args)
        sys.argv = [sys.argv[0], *user_overrides(args)]
        app = hydra.main(config_path=str(config_dir()), config_name="config", version_base="1.3")(task)
        if args in HELP_ARGS:  # printed once here, then by attnlab.__main__ from the cache, without torch
            printed = io.StringIO()
            try:
                with contextlib.redirect_stdout(printed):
                    app()  # Hydra ends with sys.exit once the help is printed
            finally:
                keep_help(args, printed.getvalue())
                sys.stdout.write(printed.getvalue())
                sys.stdout.flush()
        else:
            with refusals_raised():  # a single run's request, refused before Hydra wrote its folder
                app()
        if errors:
            raise errors[0]
    except KeyboardInterrupt:
        cause = "terminated (SIGTERM)" if terminated else "interrupted"
        print(f"attnlab: {cause}; finished jobs' records are kept (a sweep's table refreshed; the same command "
              f"resumes it; rebuild tables: attnlab compare PATH)", file=sys.stderr)
        return TERMINATED_EXIT if terminated else INTERRUPTED_EXIT
    except FailedRecords as exc:
        print(f"attnlab: {escaped(str(exc))}", file=sys.stderr)
        return 1
    except BrokenPipeError:  # the reader went away (`attnlab --help | head -1`): it read what it wanted
        reader_gone()
        return 0
    except Exception as exc:  # noqa: BLE001 - every error becomes one line; ATTNLAB_TRACEBACK=1 shows the trace
        if os.environ.get("ATTNLAB_TRACEBACK"):
            raise
        found = exc.exceptions if isinstance(exc, ExceptionGroup) else (exc,)  # a sweep's bad values, all of them
        for error in found:
            print(f"attnlab: error: {escaped(one_line(error, args))}", file=sys.stderr)
        return 2 if all(isinstance(e, REFUSALS) for e in found) else 1
    if failed:
        print(f"attnlab: {FailedRecords(failed)}", file=sys.stderr)
        return 1
    return 0


def reader_gone() -> None:
    """stdout's reader closed the pipe: what is still buffered or printed later goes to the null device,
    so nothing raises again (nor says "Broken pipe") on the way out."""
    null = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(null, sys.stdout.fileno())
    except (OSError, ValueError):  # no descriptor behind sys.stdout: nothing more can reach the pipe
        pass
    finally:
        os.close(null)


class Termination:
    """SIGTERM (a scheduler's time limit, `kill`) handled as the user's Ctrl-C: the handler of SIGINT
    in force is called, so a sweep ends as it does on Ctrl-C (records kept, tables written from
    disk, resumable). Once: a second SIGTERM does not cut the tables being written."""

    def __init__(self) -> None:
        self.received = False

    def __bool__(self) -> bool:
        return self.received

    def __call__(self, signum: int, frame: Any) -> None:
        if self.received:
            return
        self.received = True
        handler = signal.getsignal(signal.SIGINT)
        if not callable(handler):  # SIGINT ignored or left to the system: Python's own Ctrl-C
            raise KeyboardInterrupt()
        handler(signal.SIGINT, frame)  # raises, or holds it until a start completes (attnlab.app.guard)


def on_sigterm_as_ctrl_c() -> Termination:
    termination = Termination()
    signal.signal(signal.SIGTERM, termination)
    return termination


def exit_fast(code: int) -> NoReturn:
    """Exit with `code` once everything is written, without tearing the interpreter down.

    Why: once torch is imported, Python's finalization (freeing every module's objects one by
    one) costs a large part of a single run (figures in benchmarks/README.md). Nothing is pending
    by then (records, tables and event files are closed), and the atexit handlers still run,
    logging's flush among them. A thread still running (one a module started and left behind) gets
    a short grace and is then named and not waited for: it never holds the command open.
    """
    # what a normal exit runs before joining threads (joblib's loky tells its workers to stop there;
    # skipped, multiprocessing's atexit join below would wait for them forever)
    for shutdown in reversed(getattr(threading, "_threading_atexits", [])):
        shutdown()
    deadline = time.monotonic() + THREAD_GRACE_S
    lingering = [t for t in threading.enumerate() if t is not threading.current_thread() and not t.daemon]
    for thread in lingering:
        thread.join(max(0.0, deadline - time.monotonic()))
    names = [t.name for t in lingering if t.is_alive()]
    if names:
        print(f"attnlab: thread(s) {', '.join(names)} still running after the records were written; "
              f"not waited for", file=sys.stderr)
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except OSError:  # a reader that went away (`attnlab ... | head`) is not an error of the run
            pass
    os._exit(code)


def entry(on_exit: Callable[[], None] | None = None) -> NoReturn:
    """The `attnlab` command and `python -m attnlab` (attnlab.__main__); `on_exit` runs once the
    command's work is done, before the exit."""
    code = main()
    if on_exit is not None:
        on_exit()
    exit_fast(code)
