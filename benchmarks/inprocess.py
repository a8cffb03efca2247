"""In-process measurements for benchmarks/run.py (run as a subprocess, prints one JSON line).

    python benchmarks/inprocess.py jobs SWEEP_DIR OVERRIDE...   per-job time of the job's own work
    python benchmarks/inprocess.py capture N_TOKENS D_IN D_OUT REPEATS   capture overhead
    python benchmarks/inprocess.py api REPEATS   a warm attnlab.run against the run_job inside it
"""

from __future__ import annotations

import functools
import json
import statistics
import sys
import time


def _timed(owner, name: str, into: list[float]):
    original = getattr(owner, name)

    @functools.wraps(original)
    def wrapper(*args, **kwargs):
        start = time.perf_counter()
        try:
            return original(*args, **kwargs)
        finally:
            into.append(time.perf_counter() - start)

    setattr(owner, name, wrapper)


def jobs(sweep_dir: str, overrides: list[str]) -> dict:
    """Run a multirun through attnlab's CLI in this process and time every job's parts (every job in
    this process: ATTNLAB_ISOLATION=0, or the timed functions would run in each job's own process)."""
    import os

    os.environ["ATTNLAB_ISOLATION"] = "0"
    import attnlab.app.run_job
    import attnlab.sinks.tensorboard
    from attnlab.app import cli, sweep

    times: dict[str, list[float]] = {k: [] for k in ("job", "compute", "outputs", "tensorboard", "callback")}
    _timed(attnlab.app.run_job, "run_job", times["job"])  # cli.task imports run_job at call time
    _timed(attnlab.app.run_job, "compute_records", times["compute"])
    _timed(attnlab.app.run_job, "write_outputs", times["outputs"])
    _timed(attnlab.sinks.tensorboard, "write_tensorboard", times["tensorboard"])
    _timed(sweep.SweepTables, "on_job_end", times["callback"])
    import contextlib
    import io

    start = time.perf_counter()
    with contextlib.redirect_stdout(io.StringIO()):
        code = cli.main(["-m", *overrides, f"hydra.sweep.dir={sweep_dir}"])
    wall = time.perf_counter() - start
    return {"code": code, "wall": wall, **{k: v for k, v in times.items()}}


def api_calls(repeats: int) -> dict:
    """Warm attnlab.run calls (after one that imports and discovers), each against its run_job."""
    import attnlab
    import attnlab.app.run_job

    jobs: list[float] = []
    _timed(attnlab.app.run_job, "run_job", jobs)  # attnlab.run imports run_job at call time
    attnlab.run("unscaled")
    calls = []
    for _ in range(repeats):
        start = time.perf_counter()
        attnlab.run("unscaled")
        calls.append(time.perf_counter() - start)
    return {"call": statistics.median(calls), "job": statistics.median(jobs[1:])}


def capture_overhead(n_tokens: int, d_in: int, d_out: int, repeats: int) -> dict:
    """reference.forward(x) against attnlab.capture.recorder.capture(reference, x), interleaved, medians."""
    import torch

    from attnlab.capture.recorder import capture
    from attnlab.modules.built import plan

    x = torch.rand(n_tokens, d_in, generator=torch.Generator().manual_seed(0))
    module = plan("reference", {"d_in": d_in, "d_out": d_out}).build(123).module
    plain, captured = [], []
    for i in range(repeats + 1):
        for kind in (("plain", "capture") if i % 2 == 0 else ("capture", "plain")):
            start = time.perf_counter()
            with torch.no_grad():
                out = module(x) if kind == "plain" else capture(module, x)
            elapsed = time.perf_counter() - start
            del out
            if i:  # the first round warms up
                (plain if kind == "plain" else captured).append(elapsed)
    return {"plain": statistics.median(plain), "capture": statistics.median(captured),
            "plain_all": plain, "capture_all": captured}


if __name__ == "__main__":
    mode, rest = sys.argv[1], sys.argv[2:]
    if mode == "jobs":
        result = jobs(rest[0], rest[1:])
    elif mode == "capture":
        result = capture_overhead(*map(int, rest))
    elif mode == "api":
        result = api_calls(int(rest[0]))
    else:
        raise SystemExit(f"unknown mode {mode}")
    print(json.dumps(result))
