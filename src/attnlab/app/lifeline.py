"""Every process a command starts ends when the command dies, even by kill -9.

The `attnlab` command names itself in its environment (`mark_command`); every process that runs
its jobs inherits the name (a joblib launcher's loky worker, submitit's local job, a job worker)
and calls `end_with_command`: a thread that kills the process once the command is gone, and, when
the command is its parent, the kernel's parent-death signal too, which works even while a forward
holds the interpreter in native code. Without it such processes ran their jobs to the end and
idled for minutes holding their memory.
"""

from __future__ import annotations

import ctypes
import os
import signal
import socket
import sys
import threading
import time
from contextlib import suppress
from pathlib import Path

COMMAND_ENV = "ATTNLAB_COMMAND"  # the command's identity and place: "pid:start time@place"
WATCH_S = 0.2  # how often a process checks that its command is alive
_PR_SET_PDEATHSIG = 1  # <linux/prctl.h>

_watching: int | None = None  # the pid of this process once it watches (a forked child does not)


def mark_command() -> None:
    """Name this process as the command that the processes it starts live for."""
    os.environ[COMMAND_ENV] = process_mark(os.getpid())


def process_mark(pid: int) -> str:
    """`pid:start time@place` of a live process: it names that process and no other, here or elsewhere."""
    return f"{_identity(pid)}@{_place()}"


def alive_here(mark: str) -> bool:
    """Whether the process named by `mark` (process_mark) is alive on this machine: not a reused
    pid, nor a process of another machine, container or allocation."""
    identity, _, place = mark.partition("@")
    pid = identity.partition(":")[0]
    return pid.isdigit() and place == _place() and _identity(int(pid)) == identity


def end_with_command() -> None:
    """End this process when the command that started it (directly or not) dies. Nothing in the
    command itself, outside a command, or once already watching."""
    global _watching
    command, _, place = os.environ.get(COMMAND_ENV, "").partition("@")
    if not command or command == _identity(os.getpid()) or place != _place() or _watching == os.getpid():
        return  # a cluster's job (another machine, container or allocation) is not the command's to end
    _watching = os.getpid()
    command_pid = int(command.partition(":")[0])
    if os.getppid() == command_pid:
        _kill_on_parent_death()
    threading.Thread(target=_watch, args=(command_pid, command), daemon=True, name="attnlab-lifeline").start()


def _watch(command_pid: int, command: str) -> None:
    # also the race of a command that died before the parent-death signal was set
    while _identity(command_pid) == command:
        time.sleep(WATCH_S)
    os.kill(os.getpid(), signal.SIGKILL)  # no teardown: a job's thread or a flush could hold it


def _kill_on_parent_death() -> None:
    if not sys.platform.startswith("linux"):
        return
    with suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


def _place() -> str:
    """Where pids name the same processes: this boot of this machine, this pid namespace, this
    Slurm allocation (a job the environment was exported to runs elsewhere, in another)."""
    names = []
    for path in ("/proc/sys/kernel/random/boot_id", "/proc/self/ns/pid"):
        try:
            names.append(os.readlink(path) if path.endswith("/pid") else Path(path).read_text().strip())
        except OSError:
            names.append(socket.gethostname())
    return "/".join([*names, os.environ.get("SLURM_JOB_ID", "")])


def _identity(pid: int) -> str:
    """`pid:start time` of a live process, "" for none (gone, or a zombie not yet reaped); the
    start time tells a reused pid apart. Without /proc, the pid alone."""
    if not os.path.exists("/proc/self/stat"):
        return _pid_alive(pid)
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as file:
            stat = file.read()
    except OSError:
        return ""
    fields = stat.rpartition(")")[2].split()  # the name before ")" may hold spaces
    return "" if fields[0] in "ZXx" else f"{pid}:{fields[19]}"


def _pid_alive(pid: int) -> str:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return ""
    except PermissionError:
        pass
    return str(pid)
