"""What attnlab's training loop costs against a hand-written plain-torch loop of the same model and
task, measured in the same run.

    python benchmarks/training_cost.py                  # the induction preset's sizes, 100 steps
    python benchmarks/training_cost.py --steps 50 --repeats 3

Both sides train the same GPTModel (the book's MultiHeadAttention in every block) on the same
induction batches with AdamW, warm-up then cosine, gradient clip 1.0, one torch thread. attnlab's
side is `attnlab.training.loop.train` with no evaluation; the floor is the loop written out below.
Target: attnlab's wall per step at most 1.15x the floor's. Times are the median of interleaved
repeats (attnlab, floor, attnlab, floor, ...), each after one warm-up; peak resident memory is
the process's. The full job (both sides, evaluations, measures) is timed once for scale.
"""

from __future__ import annotations

import argparse
import math
import resource
import statistics
import time

import torch
import torch.nn.functional as F

from attnlab.training.counterparts import counterpart
from attnlab.training.job import plan, run_seed
from attnlab.training.loop import train
from attnlab.training.settings import TrainingConf
from attnlab.training.start import build
from attnlab.training.tasks import make_task

TARGET = 1.15


def handwritten(model: torch.nn.Module, task, settings: TrainingConf, seed: int, evaluate=None) -> None:
    """The floor: the plain loop a learner writes, nothing else; `evaluate()`, if given, at init and
    every eval_every steps (training_grid.py's second floor)."""
    optimizer = torch.optim.AdamW(model.parameters(), lr=settings.lr, weight_decay=settings.weight_decay)
    warmup, steps = settings.warmup, settings.steps

    def factor(step: int) -> float:
        if step < warmup:
            return (step + 1) / warmup
        return 0.5 * (1 + math.cos(math.pi * (step - warmup) / (steps - warmup)))
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, factor)
    generator = torch.Generator().manual_seed(seed)
    if evaluate is not None:
        evaluate()
    for step in range(1, steps + 1):
        batch = task.batch(settings.batch, generator)
        logits = model(batch.inputs)
        loss = F.cross_entropy(logits[batch.scored], batch.targets[batch.scored])
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), settings.clip)
        optimizer.step()
        scheduler.step()
        if evaluate is not None and (step % settings.eval_every == 0 or step == steps):
            evaluate()


def timed(loop, settings: TrainingConf, task, reference) -> float:
    torch.manual_seed(0)
    model = build(reference, task.vocab, settings)
    start = time.perf_counter()
    loop(model, task, settings, 0)
    return (time.perf_counter() - start) / settings.steps


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    torch.set_num_threads(1)
    settings = TrainingConf(steps=args.steps)
    task = make_task(settings)
    sizes = settings.model
    reference = counterpart("reference", sizes.d_model, sizes.context_length, sizes.num_heads)
    timed(train, settings, task, reference), timed(handwritten, settings, task, reference)  # warm-up
    ours, floor = [], []
    for _ in range(args.repeats):
        ours.append(timed(train, settings, task, reference))
        floor.append(timed(handwritten, settings, task, reference))
    ratio = statistics.median(ours) / statistics.median(floor)
    start = time.perf_counter()
    run_seed(plan("unscaled", settings), 0)
    job = time.perf_counter() - start
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"steps {args.steps}, repeats {args.repeats}, one thread")
    print(f"attnlab loop  {statistics.median(ours) * 1e3:.1f} ms/step (median)")
    print(f"hand-written  {statistics.median(floor) * 1e3:.1f} ms/step (median)")
    print(f"ratio         {ratio:.3f}x (target <= {TARGET}x): {'PASS' if ratio <= TARGET else 'FAIL'}")
    print(f"one seed of a job (reference and unscaled, evaluations, measures): {job:.1f} s wall")
    print(f"peak resident memory {peak:.0f} MiB")


if __name__ == "__main__":
    main()
