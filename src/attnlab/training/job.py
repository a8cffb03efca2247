"""One training job: checked before any work, then per seed the reference and the variant trained
from one start, measured at init and at the end, evaluated on a fixed set; the seeds pooled into a
table and a verdict. From Python: `attnlab.train(...)` (attnlab.app.api_training)."""

from __future__ import annotations

import statistics
import sys
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from attnlab.compute.pipeline import resolved_device
from attnlab.errors import UserError
from attnlab.training import reference_cache
from attnlab.training.checkpoint import (
    Checkpoints,
    SeedProgress,
    SideSaving,
    checkpoint_key,
    finished_seeds,
    seed_done,
    stop_on_sigterm,
)
from attnlab.training.counterparts import Counterpart, counterpart
from attnlab.training.evaluation import evaluate
from attnlab.training.gpt import GPTModel
from attnlab.training.head_probes import HEAD_WEIGHTS, HeadProbes, induction_formed
from attnlab.training.loop import train as train_loop
from attnlab.training.lr_grid import at_best, rates_of
from attnlab.training.measures import NOT_MEASURED, PROBE_WEIGHTS, measure
from attnlab.training.settings import TrainingConf, attention_width, check_settings
from attnlab.training.start import same_start
from attnlab.training.tasks import Batch, Task, make_task
from attnlab.training.verdict import Row, judged

if TYPE_CHECKING:
    import pandas as pd

EVAL_SEED = 2**31 - 1  # the evaluation and probe batches: the same for every seed, never a training batch's
SIDES = ("reference", "variant")


@dataclass
class Plan:
    """What a checked job trains: its settings, task and the two counterparts."""

    settings: TrainingConf
    task: Task
    reference: Counterpart
    variant: Counterpart
    device: str = "cpu"
    cache: Path | None = None  # a sweep's folder for the trained references (attnlab.training.reference_cache)


@dataclass(repr=False)
class TrainingResult:
    variant: str
    classes: dict[str, str]  # which class ran on each side
    settings: dict[str, Any]
    seeds: list[dict[str, Any]]  # per seed: each side's losses, evaluations, measures, summary
    rows: list[Row] = field(default_factory=list)  # the table's rows (attnlab.training.verdict.Row)
    verdict: list[str] = field(default_factory=list)

    @property
    def table(self) -> pd.DataFrame:
        """Mean ± std per measure and side, whether the difference is clear of seed noise, and the
        seeds that would separate one within it."""
        import pandas as pd

        shown = [row.as_dict() for row in self.rows]
        return pd.DataFrame({"reference": [r["reference"] for r in shown], self.variant: [r["variant"] for r in shown],
                             "clear of seed noise": [r["noise"] for r in shown],
                             "seeds to separate": [r["seeds_to_separate"] for r in shown]},
                            index=pd.Index([r["what"] for r in shown], name="measure"))

    def __repr__(self) -> str:
        said = "".join(f"\n  - {sentence}" for sentence in self.verdict)
        return (f"TrainingResult({self.variant} against the reference, {self.settings['task']}, {len(self.seeds)} "
                f"seed(s), {self.settings['steps']} steps; .table: {len(self.rows)} measures; .verdict:{said})")

    def as_dict(self) -> dict[str, Any]:
        """As training.json holds it: the heatmaps' arrays left out."""
        seeds = [{**run, **{side: {**{k: v for k, v in run[side].items() if k != HEAD_WEIGHTS},
                                   "measures": {step: {k: v for k, v in measured.items() if k != PROBE_WEIGHTS}
                                                for step, measured in run[side]["measures"].items()}}
                            for side in SIDES}} for run in self.seeds]
        return {"variant": self.variant, "classes": self.classes, "settings": self.settings, "seeds": seeds,
                "table": [row.as_dict() for row in self.rows], "verdict": self.verdict}

    def _repr_html_(self) -> str:
        from attnlab.training.page import page_html

        return page_html(self.as_dict())


def plan(variant: str, settings: TrainingConf, device: str = "cpu", cache: Path | None = None) -> Plan:
    """Everything that can be wrong, before any training: the task's sizes, the counterparts, and
    that the variant's layer runs backward."""
    check_settings(settings)
    task = make_task(settings)
    sizes = settings.model
    made = [counterpart(name, sizes.d_model, sizes.context_length, sizes.num_heads, attention_width(sizes))
            for name in ("reference", variant)]
    _check_backward(made[1], sizes.d_model)
    return Plan(settings, task, made[0], made[1], device=resolved_device(device), cache=cache)


def _check_backward(side: Counterpart, d_model: int) -> None:
    """One forward and backward of the variant's layer on two tokens: it must keep the width the
    residual stream adds it to, and give gradients."""
    try:
        output = side.make()(torch.randn(1, 2, d_model))  # (1, 2, d_out)
        if not isinstance(output, torch.Tensor) or output.shape != (1, 2, side.d_out):
            shown = tuple(output.shape) if isinstance(output, torch.Tensor) else type(output).__name__
            raise UserError(f"variant={side.name}: cannot train: {side.describe} returns {shown} for (1, 2, {d_model}) "
                            f"inputs; a block needs (b, num_tokens, {side.d_out}): its heads side by side")
        output.sum().backward()
    except UserError:
        raise
    except Exception as exc:  # noqa: BLE001 - whatever the class raises, it cannot train
        reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise UserError(f"variant={side.name}: cannot train: {side.describe} fails forward or backward: {reason}") from None


def _moved(batch: Batch, device: str) -> Batch:
    return Batch(batch.inputs.to(device), batch.targets.to(device), batch.scored.to(device))


def run_seed(job: Plan, seed: int, checkpoints: Checkpoints | None = None,
             done: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """Both sides trained from one start on the seed's batches; evaluated on the fixed set. With
    `checkpoints`, resumed from the job's checkpoint when it holds this seed (`done`: the seeds
    finished before it, kept in every checkpoint)."""
    settings = job.settings
    evaluation = _moved(job.task.batch(settings.eval_batch, torch.Generator().manual_seed(EVAL_SEED), "eval"), job.device)
    probe = _moved(job.task.batch(8, torch.Generator().manual_seed(EVAL_SEED + 1), "eval"), job.device)
    pair = same_start(job.reference, job.variant, job.task.vocab, settings, seed)
    models = {"reference": pair.reference.to(job.device), "variant": pair.variant.to(job.device)}
    init = {side: measure(models[side], probe, models["reference"] if side == "variant" else None) for side in SIDES}
    progress = SeedProgress(checkpoints or Checkpoints(None, "", 0), done or [], seed, models)
    trained = {"reference": _trained_reference(models["reference"], job, evaluation, seed, progress)}
    trained["variant"] = _train_side(models["variant"], job, evaluation, seed, progress.saving("variant"))
    end = {side: measure(models[side], probe, models["reference"] if side == "variant" else None) for side in SIDES}
    sides = {side: {**trained[side], "measures": {"0": init[side], str(settings.steps): end[side]}} for side in SIDES}
    for side in SIDES:
        sides[side]["summary"] = summary(sides[side], settings)
    return {"seed": seed, "loaded": pair.loaded, **sides}


def _trained_reference(model: GPTModel, job: Plan, evaluation: Batch, seed: int,
                       progress: SeedProgress) -> dict[str, Any]:
    """The reference trained, or loaded from the sweep's cache when another job trained it already."""
    finished = progress.finished("reference")
    if finished is not None:  # the checkpoint set its parameters
        return finished
    key = None
    if job.cache is not None:
        decides = {k: v for k, v in asdict(job.settings).items() if k != "checkpoint_every"}
        key = reference_cache.cache_key(decides, seed, job.reference.describe, job.device)
        cached = reference_cache.load(job.cache, key, model)
        if cached is not None:
            cached = {**cached, "from_cache": True}  # another job trained it (and wrote its TensorBoard run)
            progress.side_done("reference", cached)
            return cached
    side = _train_side(model, job, evaluation, seed, progress.saving("reference"))
    if job.cache is not None and key is not None:
        reference_cache.save(job.cache, key, side, model)
    progress.side_done("reference", side)
    return side


def _train_side(model: GPTModel, job: Plan, evaluation: Batch, seed: int, saving: SideSaving) -> dict[str, Any]:
    evals = saving.evals  # resumed: the evaluations and the heads' measures so far
    probes = HeadProbes(job.task, evaluation, saving.probes) if job.settings.head_probes else None

    def checkpoint(step: int) -> None:
        evals.append({"step": step, **evaluate(model, evaluation)})
        if probes is not None:
            probes.at(model, step)
            saving.probes = probes.recorded()

    if saving.resume is None:
        checkpoint(0)
    losses = train_loop(model, job.task, job.settings, seed, job.device, at_step=checkpoint, saving=saving)
    return {"losses": losses, "evals": evals, **(probes.recorded() if probes is not None else {})}


def summary(side: dict[str, Any], settings: TrainingConf) -> dict[str, Any]:
    """The side's numbers the table pools: "steps to target" of a run that never got there is
    counted as one evaluation past the end; under NOT_MEASURED, why a measure is missing."""
    evals, last = side["evals"], side["evals"][-1]
    reached = next((e["step"] for e in evals if e["causal_accuracy"] >= settings.target_accuracy), None)
    at_init, at_end = side["measures"]["0"], side["measures"][str(settings.steps)]
    pooled: dict[str, Any] = {
        "final_train_loss": statistics.fmean(side["losses"][-10:]), "reached": float(reached is not None),
        "steps_to_target": float(reached if reached is not None else settings.steps + settings.eval_every),
        **{k: last[k] for k in ("teacher_forced_accuracy", "causal_accuracy", "causal_loss")}}
    missing: dict[str, str] = {}
    for name, measures in (("init", at_init), ("end", at_end)):
        for what in ("max_weight", "entropy"):
            values = [v for k, v in measures["attention"].items() if k.endswith(what)]
            if values:
                pooled[f"{name}_{what}"] = statistics.fmean(values)
            else:
                missing[f"{name}_{what}"] = measures.get(NOT_MEASURED, {}).get("attention", "no attention weights")
    if any("induction_max" in point for point in side.get("heads", [])):  # a seed whose heads never formed
        # counts as one evaluation past the end
        formed = induction_formed(side["heads"])
        pooled["induction_formed"] = float(formed is not None)
        pooled["steps_to_induction"] = formed if formed is not None else float(settings.steps + settings.eval_every)
    queries = [v for k, v in at_init["grad_norm"].items() if k.endswith("/queries")]
    if queries:
        pooled["init_query_grad_norm"] = statistics.fmean(queries)
    else:
        missing["init_query_grad_norm"] = at_init.get(NOT_MEASURED, {}).get("grad_norm", "no query projection found")
    pooled[NOT_MEASURED] = missing
    return pooled


def _seed_run(job: Plan, variant: str, seed: int, saved: Checkpoints, done: list[dict[str, Any]]) -> dict[str, Any]:
    """run_seed, whatever the variant's class raises in training said in one line (the measures
    that cannot be taken are lines of the table, never an error)."""
    try:
        return run_seed(job, seed, saved, done)
    except UserError:
        raise
    except Exception as exc:  # noqa: BLE001 - a plugin's class may raise anything at a length the check did not try
        reason = str(exc).splitlines()[0] if str(exc) else ""
        raise UserError(f"variant={variant}: training stopped on seed {seed}: {job.variant.describe} raised "
                        f"{type(exc).__name__}: {reason}") from None


def run(job: Plan, variant: str, seeds: Iterable[int], checkpoints: Path | None = None) -> TrainingResult:
    """Every seed at every rate of `training.lr` (one rate: the run itself); with a grid each side
    is pooled at its own best rate (attnlab.training.lr_grid). With `checkpoints` (a folder) the
    job's checkpoint is written there every settings.checkpoint_every steps and at SIGTERM, and a
    checkpoint found there is resumed (a grid's rates each in a folder of their own)."""
    seeds, rates = list(seeds), rates_of(job.settings.lr)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # one thread per process: two on busy shared cores cost many times the CPU
    try:
        with stop_on_sigterm() as stop:
            by_rate = {}
            for rate in rates:
                at_rate = replace(job, settings=replace(job.settings, lr=rate))
                folder = checkpoints / f"lr={rate:g}" if checkpoints is not None and len(rates) > 1 else checkpoints
                by_rate[rate] = _seeds(at_rate, variant, seeds, Checkpoints(
                    folder, _checkpoint_key(at_rate, variant, seeds), job.settings.checkpoint_every, stop), folder)
    finally:  # as found: a sweep's job worker whose torch defaults a job left changed is not used again
        torch.set_num_threads(threads)
    per_seed = by_rate[rates[0]] if len(rates) == 1 else at_best(by_rate)
    table, said = judged(variant, per_seed, asdict(job.settings))
    return TrainingResult(variant, {"reference": job.reference.describe, "variant": job.variant.describe},
                          asdict(job.settings), per_seed, table, said)


def _seeds(job: Plan, variant: str, seeds: list[int], saved: Checkpoints, folder: Path | None) -> list[dict[str, Any]]:
    """Every seed at the job's one rate, from the seeds its checkpoint says are done."""
    per_seed = finished_seeds(saved)
    if per_seed and not (saved.resumed or {}).get("current"):
        print(f"attnlab: resuming training from the checkpoint in {folder}: {len(per_seed)} of "
              f"{len(seeds)} seed(s) done", file=sys.stderr)
    for seed in seeds[len(per_seed):]:
        per_seed.append(_seed_run(job, variant, seed, saved, per_seed))
        seed_done(saved, per_seed)
    return per_seed


def _checkpoint_key(job: Plan, variant: str, seeds: list[int]) -> str:
    """What decides the job's results: a checkpoint of anything else is not resumed."""
    settings = {k: v for k, v in asdict(job.settings).items() if k != "checkpoint_every"}
    return checkpoint_key({"variant": variant, "settings": settings, "seeds": seeds, "device": job.device,
                           "classes": [job.reference.describe, job.variant.describe]})
