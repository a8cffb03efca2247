"""What the per-head measures at every evaluation cost a training run: the same seed of the same
job (reference and variant, evaluations, measures at init and at the end) with and without
`training.head_probes`, interleaved in one process, and the TensorBoard runs written with and
without the heads' heatmaps.

    python benchmarks/head_probes_cost.py                       # the default preset's settings
    python benchmarks/head_probes_cost.py --eval-every 10 --repeats 3

Target: the run with the measures at most 1.10x the run without them (wall and CPU, medians of
interleaved repeats after one warm-up each way; one torch thread).
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import torch

from attnlab.sinks.training_files import step_scalars
from attnlab.sinks.training_tensorboard import write_seed_runs
from attnlab.training.head_probes import HeadProbes
from attnlab.training.job import SIDES, plan, run_seed
from attnlab.training.settings import TrainingConf

TARGET = 1.10


def timed(work: Callable[[], object]) -> tuple[float, float, object]:
    """(wall seconds, CPU seconds, what `work` returned)."""
    wall, cpu = time.perf_counter(), time.process_time()
    returned = work()
    return time.perf_counter() - wall, time.process_time() - cpu, returned


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--eval-every", type=int, default=25)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--variant", default="unscaled")
    args = parser.parse_args()
    torch.set_num_threads(1)
    settings = TrainingConf(steps=args.steps, eval_every=args.eval_every)
    jobs = {probes: plan(args.variant, dataclasses.replace(settings, head_probes=probes)) for probes in (True, False)}
    for probes in (True, False):  # warm-up
        run_seed(jobs[probes], 1)
    inside: list[float] = []  # CPU seconds inside the measures themselves, by the clock around each call
    measure_heads = HeadProbes.at

    def clocked(self: HeadProbes, model: torch.nn.Module, step: int) -> None:
        start = time.process_time()
        measure_heads(self, model, step)
        inside.append(time.process_time() - start)

    HeadProbes.at = clocked  # type: ignore[method-assign]
    times: dict[bool, list[tuple[float, float]]] = {True: [], False: []}
    result = None
    for repeat in range(args.repeats):
        for probes in (True, False) if repeat % 2 == 0 else (False, True):
            wall, cpu, returned = timed(lambda: run_seed(jobs[probes], 1))
            times[probes].append((wall, cpu))
            result = returned if probes else result
    assert isinstance(result, dict)
    data = {"variant": args.variant, "seeds": [result]}
    scalars = [{side: step_scalars(result[side]) for side in SIDES}]
    with tempfile.TemporaryDirectory() as folder:
        drawn = timed(lambda: write_seed_runs(data, Path(folder) / "a", "induction", scalars, [result]))
        plain = timed(lambda: write_seed_runs(data, Path(folder) / "b", "induction", scalars, None))
    evaluations = len(result["variant"]["evals"])
    print(f"{args.steps} steps, {evaluations} evaluations (eval_every {args.eval_every}), {args.repeats} repeats, one thread")
    for kind, index in (("wall", 0), ("CPU", 1)):
        on, off = (statistics.median(t[index] for t in times[p]) for p in (True, False))
        print(f"{kind:4}: with the head measures {on:.2f} s, without {off:.2f} s: {on / off:.3f}x "
              f"(target <= {TARGET}x): {'PASS' if on / off <= TARGET else 'FAIL'}")
    per_run = sum(inside) / len(times[True])
    print(f"inside the measures: {per_run:.2f} CPU-s a run ({len(inside) // len(times[True])} calls, "
          f"{per_run / statistics.median(t[1] for t in times[False]):.1%} of the run without them)")
    print(f"TensorBoard runs of one seed (both sides): {drawn[0]:.2f} s with the heatmaps, {plain[0]:.2f} s without")


if __name__ == "__main__":
    main()
