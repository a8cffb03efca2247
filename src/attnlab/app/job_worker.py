"""The job worker: a process, forked from a forkserver that has torch and attnlab's plugins imported,
that runs a process's isolated jobs one after another (attnlab.app.isolation).

Why a forkserver: a plain fork of a process whose torch has used its thread pool can hang the
child; spawn pays a fresh interpreter and torch's import for every process; a forkserver pays
that once (everything a job imports is imported by it first: attnlab.app.preload). Why one
worker for many jobs: a fresh process for every job paid its fork and what a fresh process pays
that a warm one does not (copy-on-write page faults, caches filled again), more than a small
job's own work. A worker's jobs share its process as jobs in one process always did; it ends
after a job that did not end with every record ok, or that changed torch's defaults, and the
next job starts in a fresh one. The `attnlab` command starts the forkserver's imports beside its
own when it will need it (`start_early`); under a local launcher (joblib's workers, submitit's
local jobs) that server is the launcher's processes' too, so none of them imports torch and the
preload again (`_adopt_shared`). Costs: `python benchmarks/run.py --only isolation`,
`benchmarks/training_grid.py`, benchmarks/README.md.
"""

from __future__ import annotations

import faulthandler
import multiprocessing
import os
import signal
import sys
import tempfile
import threading
from contextlib import suppress
from dataclasses import dataclass
from multiprocessing import forkserver, resource_tracker
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from attnlab.app.crash_site import crash_site
from attnlab.app.guard import Failure, UserInterrupt, Work, guarded
from attnlab.app.job_outcome import Interrupted, Outcome, Raised, Ran, Reply, TimedOut
from attnlab.app.lifeline import COMMAND_ENV, alive_here, end_with_command, process_mark
from attnlab.app.streams import ensure_std_streams
from attnlab.errors import UserError

PRELOAD = ["torch", "attnlab.app.preload"]  # imported once by the forkserver, inherited by every job
ISOLATION_ENV = "ATTNLAB_ISOLATION"  # 0: jobs in the command's process (attnlab.app.isolation)
SHARED_ENV = "ATTNLAB_FORKSERVER"  # the command's forkserver for its launcher's processes: "command server address"
# Hydra launchers whose processes run on the command's machine and share its forkserver: not submitit_local, whose
# job process must be the job worker's parent for its preemption signal to reach the training (test_preemption)
LOCAL_LAUNCHERS = ("joblib",)
ASKS = {"-h", "--help", "--hydra-help", "-c", "--cfg", "-i", "--info", "-sc", "--shell-completion"}  # no job runs


def _outcome(work: Work, fail: Failure) -> Outcome:
    """One job, in a job worker."""
    try:
        return Ran(guarded(work, fail))
    except UserInterrupt:
        return Interrupted()
    except UserError as exc:
        return Raised("user", str(exc))
    except Exception as exc:  # noqa: BLE001 - reported by the parent as this job's one-line error
        return Raised(type(exc).__name__, str(exc))


def _serve(jobs: Connection, sender_alive: Connection, fault_log: str) -> None:
    """A job worker: runs the jobs sent over `jobs`, one after another, each answered with its
    outcome. It ends after a job that did not end with every record ok, or that changed torch's
    defaults or the process's state (attnlab.process_state: the working folder, the umask,
    autocast, a replaced torch function), so the next job starts in a fresh process; and when
    the process sending the jobs ends (`sender_alive` closes), even mid-job: a killed joblib worker's job is then missing and launched again, never a second
    writer of the same folder."""
    from attnlab.process_state import process_state  # torch: the forkserver imported it, this module does not

    ensure_std_streams()  # the forkserver may have started without them (a command run with `>&- 2>&-`)
    threading.Thread(target=_exit_on_eof, args=(sender_alive,), daemon=True).start()
    end_with_command()  # and when the command dies (attnlab.app.lifeline)
    faults = open(fault_log, "w", encoding="utf-8")  # noqa: SIM115 - open as long as the process: a crash writes it
    faulthandler.enable(file=faults, all_threads=False)  # where native code crashed: the parent says it (crash_site)
    while True:
        try:
            work, fail = jobs.recv()
        except (EOFError, OSError, KeyboardInterrupt):  # the sender is done, or the user's Ctrl-C between jobs
            os._exit(0)
        faults.seek(0)
        faults.truncate()  # this job's crash only
        defaults, state = torch_defaults(), process_state()
        outcome = _outcome(work, fail)
        clean = outcome == Ran([]) and torch_defaults() == defaults and process_state() == state
        with suppress(OSError):  # an output closed under it (`| head`) is not the job's failure
            for stream in (sys.stdout, sys.stderr):  # what the job printed, before the parent moves on
                stream.flush()
        try:
            jobs.send(Reply(outcome, retiring=not clean))  # the sender then stops this worker, not sending it another job
        except OSError:  # the sender is gone: no one to tell
            os._exit(0)
        if not clean:
            os._exit(0)  # no interpreter teardown: a module's thread could hold the process


@dataclass(frozen=True)
class TorchDefaults:
    """What a module may change for every job after it in the same process."""

    dtype: Any  # torch.dtype: this module imports torch only in the worker
    grad_enabled: bool
    num_threads: int
    deterministic: bool
    float32_matmul_precision: str


def torch_defaults() -> TorchDefaults:
    import torch  # the worker's forkserver imported it: no cost, and this module stays light

    return TorchDefaults(torch.get_default_dtype(), torch.is_grad_enabled(), torch.get_num_threads(),
                         torch.are_deterministic_algorithms_enabled(), torch.get_float32_matmul_precision())


def _exit_on_eof(connection: Connection) -> None:
    with suppress(EOFError, OSError):
        connection.recv()
    os.kill(os.getpid(), signal.SIGKILL)  # not os._exit: a running forward has it replaced (attnlab.compute.pipeline)


class JobWorker:
    """A job worker's process (see `_serve`), forked from the forkserver."""

    def __init__(self, context: multiprocessing.context.ForkServerContext) -> None:
        self.jobs, jobs = context.Pipe()
        sender_alive, self.alive = context.Pipe(duplex=False)  # never written: closed when this process ends
        descriptor, self.fault_log = tempfile.mkstemp(prefix="attnlab-faults-", suffix=".log")
        os.close(descriptor)
        self.process = context.Process(target=_serve, args=(jobs, sender_alive, self.fault_log), daemon=True)
        self.retiring = False
        self.crash = ""  # once stopped after a crash: where it died (attnlab.app.crash_site)
        self.process.start()
        jobs.close()
        sender_alive.close()

    def run(self, work: Work, fail: Failure, timeout_s: float | None) -> Outcome | TimedOut | None:
        """The job's outcome; TimedOut, or None when the worker died without one. Sets `retiring`
        when the worker ends after this job."""
        try:
            self.jobs.send((work, fail))
        except OSError:  # it ended before reading the job
            return None
        answer = _wait(self.jobs, timeout_s)
        if not isinstance(answer, Reply):
            return answer
        self.retiring = answer.retiring
        return answer.outcome

    def stop(self, grace_s: float = 0.0) -> None:
        if grace_s:
            self.process.join(grace_s)
        if self.process.is_alive():
            self.process.kill()
        self.process.join()
        self.jobs.close()
        self.alive.close()
        with suppress(OSError):
            self.crash = crash_site(Path(self.fault_log).read_text(encoding="utf-8", errors="replace"))
            os.unlink(self.fault_log)


_workers: dict[int, JobWorker] = {}  # this process's job worker, by pid (a forked child has its own)


def worker_of_this_process() -> JobWorker:
    """This process's job worker, started (or started again, after a job ended the last) on demand."""
    worker = _workers.get(os.getpid())
    if worker is None or not worker.process.is_alive():
        if worker is not None:
            worker.stop()
        worker = _workers[os.getpid()] = JobWorker(_forkserver_context())
    return worker


def _forkserver_context() -> multiprocessing.context.ForkServerContext:
    if multiprocessing.get_start_method(allow_none=True) not in (None, "fork", "spawn", "forkserver"):
        # a joblib worker names loky's own method, which the job's process is told to use and cannot find
        multiprocessing.set_start_method("forkserver", force=True)
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload([*PRELOAD, *main_package()])
    _adopt_shared()
    return context


def start_early(args: list[str]) -> bool:
    """Start the forkserver's imports now, beside this process's own start (about as long: both
    import torch), when the command `args` will isolate jobs in this process or in its local
    launcher's processes (which then fork their job workers from it: `_adopt_shared`). Returns
    whether it did; the caller then calls `stop_early` once the command ends, so that a refused
    command leaves no server importing, holding the caller's output."""
    shares = shares_with_launcher(args)
    if not (isolates_here(args) or shares):
        return False
    _forkserver_context()
    forkserver.ensure_running()
    if shares:
        server: Any = forkserver._forkserver  # multiprocessing keeps no public handle (nor typed fields)
        os.environ[SHARED_ENV] = (f"{os.environ.get(COMMAND_ENV, '')} {process_mark(server._forkserver_pid)} "
                                  f"{server._forkserver_address}")
    return True


def shares_with_launcher(args: list[str]) -> bool:
    """Whether the command `args` is a sweep whose isolated jobs run in a launcher's processes on
    this machine (LOCAL_LAUNCHERS), which then share the command's forkserver."""
    sweep = bool({"-m", "--multirun"} & set(args))
    local = any(a.partition("=")[2] in LOCAL_LAUNCHERS for a in args if a.startswith("hydra/launcher="))
    return sweep and local and not ASKS & set(args) and os.environ.get(ISOLATION_ENV, "1") != "0"


# the forkserver client's fields `_adopt_shared` sets, as Python 3.11 to 3.13 name them
_CLIENT_FIELDS = ("_forkserver_pid", "_forkserver_address", "_forkserver_alive_fd")


def _adopt_shared() -> None:
    """Fork this process's job workers from the command's forkserver (`SHARED_ENV`, set by
    `start_early`) instead of starting a server of its own: a launcher's process (a joblib worker)
    then pays neither the server's start nor its imports of torch and the preload, which the
    command's server made once, beside the command's own start. Not in the command itself (its
    server is its own), nor in another command started under it (its plugins may differ: it marks
    itself as the command, attnlab.app.lifeline), nor when the server is gone or another
    machine's: then the process starts its own as before. multiprocessing has no public way to name a running server: its client's
    three fields are set (the address, the fd a job's process gets as the server's "alive" pipe,
    and a check that the server lives in place of the check of a child's exit status)."""
    command, mark, address = (os.environ.get(SHARED_ENV, "").split(" ", 2) + ["", ""])[:3]
    server: Any = forkserver._forkserver
    if not address or any(getattr(server, field, None) is not None for field in _CLIENT_FIELDS) \
            or not all(hasattr(server, field) for field in _CLIENT_FIELDS) or hasattr(server, "_forkserver_authkey"):
        return  # a client whose fields differ (a later Python's, one that authenticates): a server of its own
    if command != os.environ.get(COMMAND_ENV) or not alive_here(mark):
        return

    def ensure_running() -> None:
        resource_tracker.ensure_running()  # the client's own, as the server's check would start it
        if not alive_here(mark):  # the command's server was stopped: a server of this process's own
            del server.ensure_running
            os.close(server._forkserver_alive_fd)
            server._forkserver_address = server._forkserver_alive_fd = None
            os.environ.pop(SHARED_ENV, None)
            server.ensure_running()

    server._forkserver_address = address
    server._forkserver_alive_fd = os.open(os.devnull, os.O_RDONLY)  # never read: a job worker starts no server
    server.ensure_running = ensure_running


def isolates_here(args: list[str]) -> bool:
    """Whether the command `args` runs isolated jobs in this process: a sweep run by Hydra's basic
    launcher (another launcher runs them in its workers), or a run with `timeout_s`; not a
    request for help or for the config, and not with ATTNLAB_ISOLATION=0."""
    sweep = bool({"-m", "--multirun"} & set(args))
    elsewhere = any(a.startswith("hydra/launcher=") and a != "hydra/launcher=basic" for a in args)
    timeout = any(a.startswith("timeout_s=") and a != "timeout_s=null" for a in args)
    return ((sweep and not elsewhere) or timeout) and not ASKS & set(args) and os.environ.get(ISOLATION_ENV, "1") != "0"


def stop_worker() -> None:
    """Stop this process's job worker, if it has one: the next isolated job starts another."""
    worker = _workers.pop(os.getpid(), None)
    if worker is not None:
        worker.stop()


def stop_early() -> None:
    """Stop this process's job worker and the forkserver `start_early` started."""
    stop_worker()
    pid = getattr(forkserver._forkserver, "_forkserver_pid", None)  # multiprocessing keeps no public handle
    if pid is not None:
        with suppress(OSError):
            os.kill(pid, signal.SIGKILL)


def main_package() -> list[str]:
    """The package of the module this process runs as `__main__` (a joblib worker runs loky's
    `...backend.popen_loky_posix`), which multiprocessing runs again as `__mp_main__` in every
    job's process: imported once by the forkserver, a job then runs only that module's own lines.
    Not the module itself: runpy warns when it finds it imported. A package's `__main__` (`python
    -m attnlab`) is never run again."""
    name = getattr(getattr(sys.modules["__main__"], "__spec__", None), "name", None) or ""
    package, _, module = name.rpartition(".")
    return [package] if package and module != "__main__" else []


def _wait(parent: Connection, timeout_s: float | None) -> Reply | TimedOut | None:
    """The child's reply; TimedOut, or None when it died without one."""
    if not parent.poll(timeout_s):
        return TimedOut()
    try:
        reply: Reply = parent.recv()  # what the worker sends (`_serve`): always a Reply
    except EOFError:  # the pipe closed without a word: the process died
        return None
    return reply
