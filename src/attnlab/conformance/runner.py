"""The survey run: the pending types in chunks, each chunk in a worker subprocess (a hang or a
crash of one type takes its worker, never the survey), `jobs` workers at a time. A type whose
worker died on it is run once more, then recorded as a timeout or a crash."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from attnlab.conformance.store import attempts, done, mark_started, row_path, write_row
from attnlab.conformance.survey import Row

POLL = 0.5  # seconds between looks at a worker
WORKER = "attnlab.conformance.worker"
STARTUP = 120.0  # seconds a worker may take to import torch and transformers on a busy machine


def all_types() -> list[str]:
    """Every model type the installed transformers knows."""
    # transformers' __all__ there leaves out the mapping the module defines
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING_NAMES  # type: ignore[attr-defined]

    return sorted(CONFIG_MAPPING_NAMES)


def run_survey(folder: Path, types: list[str], jobs: int = 1, timeout: float = 120.0, chunk: int = 20,
               progress: bool = True, worker: str = WORKER) -> None:
    """Survey the `types` not yet done in `folder`; `worker`: the module a worker runs (`-m`)."""
    (folder / "rows").mkdir(parents=True, exist_ok=True)
    finished = done(folder)
    pending = [t for t in types if t not in finished]
    chunks = [pending[i:i + chunk] for i in range(0, len(pending), chunk)]
    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        for n, _ in enumerate(pool.map(lambda c: _run_chunk(folder, c, timeout, worker), chunks), 1):
            if progress:
                print(f"attnlab.zoo: {len(done(folder) & set(types))}/{len(types)} types done ({n}/{len(chunks)} chunks)",
                      file=sys.stderr, flush=True)


def _run_chunk(folder: Path, chunk: list[str], timeout: float, worker: str) -> None:
    pending = list(chunk)
    while pending:
        killed, tail = _worker(folder, pending, timeout, worker)
        pending = [t for t in pending if not row_path(folder, t).exists()]
        if not pending:
            return
        stuck = pending[0]  # a worker goes in order: the first type without a row is the one it died on
        if attempts(folder, stuck) == 0:
            mark_started(folder, stuck)  # a worker that died before its first type counts against that type
        if attempts(folder, stuck) >= 2:
            message = f"no result in {timeout:g} s, twice" if killed else f"the worker died, twice: {tail}"
            write_row(folder, Row(stuck, outcome="timeout" if killed else "crash", message=message[:300]))
            pending = pending[1:]


def _worker(folder: Path, types: list[str], timeout: float, worker: str) -> tuple[bool, str]:
    """Run one worker over `types`; (whether it was killed for exceeding `timeout` on a type, its
    stderr's last line)."""
    log = folder / "rows" / f"{types[0]}.stderr"
    launched = time.time()
    with log.open("w") as err:
        proc = subprocess.Popen([sys.executable, "-m", worker, str(folder), *types],
                                stdout=subprocess.DEVNULL, stderr=err, start_new_session=True)
        killed = False
        while proc.poll() is None:
            time.sleep(POLL)
            current = next((t for t in types if not row_path(folder, t).exists()), None)
            marker = folder / "rows" / f"{current}.started"
            started = marker.stat().st_mtime if marker.exists() else 0.0
            # a type's limit runs from its start; before the worker reaches it, its imports have a grace
            deadline = started + timeout if started >= launched else launched + timeout + STARTUP
            if current is not None and time.time() > deadline:
                os.killpg(proc.pid, signal.SIGKILL)  # the worker's own session: it and anything it started
                killed = True
        proc.wait()
    lines = [line for line in log.read_text(errors="replace").splitlines() if line.strip()]
    log.unlink()
    return killed, lines[-1].strip() if lines else f"exit code {proc.returncode}"
