"""One training job: checked before any work, then per seed the reference and the variant trained
from one start, measured at init and at the end, evaluated on a fixed set; the seeds pooled into a
table and a verdict. From Python: `attnlab.train(...)` (attnlab.app.api_training)."""

from __future__ import annotations

import statistics
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch

from attnlab.compute.pipeline import resolved_device
from attnlab.errors import UserError
from attnlab.training import reference_cache
from attnlab.training.counterparts import Counterpart, counterpart
from attnlab.training.evaluation import evaluate
from attnlab.training.gpt import GPTModel
from attnlab.training.head_probes import HEAD_WEIGHTS, HeadProbes, induction_formed
from attnlab.training.loop import train as train_loop
from attnlab.training.measures import PROBE_WEIGHTS, measure
from attnlab.training.settings import TrainingConf, check_settings
from attnlab.training.start import same_start
from attnlab.training.tasks import Batch, Task, make_task
from attnlab.training.verdict import Row, rows, verdict

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


@dataclass
class TrainingResult:
    variant: str
    classes: dict[str, str]  # which class ran on each side
    settings: dict[str, Any]
    seeds: list[dict[str, Any]]  # per seed: each side's losses, evaluations, measures, summary
    table: list[Row] = field(default_factory=list)
    verdict: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        """As training.json holds it: the heatmaps' arrays left out."""
        seeds = [{**run, **{side: {**{k: v for k, v in run[side].items() if k != HEAD_WEIGHTS},
                                   "measures": {step: {k: v for k, v in measured.items() if k != PROBE_WEIGHTS}
                                                for step, measured in run[side]["measures"].items()}}
                            for side in SIDES}} for run in self.seeds]
        return {"variant": self.variant, "classes": self.classes, "settings": self.settings, "seeds": seeds,
                "table": [row.as_dict() for row in self.table], "verdict": self.verdict}

    def _repr_html_(self) -> str:
        from attnlab.training.page import page_html

        return page_html(self.as_dict())


def plan(variant: str, settings: TrainingConf, device: str = "cpu", cache: Path | None = None) -> Plan:
    """Everything that can be wrong, before any training: the task's sizes, the counterparts, and
    that the variant's layer runs backward."""
    check_settings(settings)
    task = make_task(settings)
    sizes = settings.model
    made = [counterpart(name, sizes.d_model, sizes.context_length, sizes.num_heads) for name in ("reference", variant)]
    _check_backward(made[1], sizes.d_model)
    return Plan(settings, task, *made, device=resolved_device(device), cache=cache)


def _check_backward(side: Counterpart, d_model: int) -> None:
    """One forward and backward of the variant's layer on two tokens: it must keep the width the
    residual stream adds it to, and give gradients."""
    try:
        output = side.make()(torch.randn(1, 2, d_model))  # (1, 2, d_model)
        if not isinstance(output, torch.Tensor) or output.shape != (1, 2, d_model):
            shown = tuple(output.shape) if isinstance(output, torch.Tensor) else type(output).__name__
            raise UserError(f"variant={side.name}: cannot train: {side.describe} returns {shown} for (1, 2, {d_model}) "
                            f"inputs; a block's residual needs (b, num_tokens, d_model)")
        output.sum().backward()
    except UserError:
        raise
    except Exception as exc:  # noqa: BLE001 - whatever the class raises, it cannot train
        reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise UserError(f"variant={side.name}: cannot train: {side.describe} fails forward or backward: {reason}") from None


def _moved(batch: Batch, device: str) -> Batch:
    return Batch(batch.inputs.to(device), batch.targets.to(device), batch.scored.to(device))


def run_seed(job: Plan, seed: int) -> dict[str, Any]:
    """Both sides trained from one start on the seed's batches; evaluated on the fixed set."""
    settings = job.settings
    evaluation = _moved(job.task.batch(settings.eval_batch, torch.Generator().manual_seed(EVAL_SEED), "eval"), job.device)
    probe = _moved(job.task.batch(8, torch.Generator().manual_seed(EVAL_SEED + 1), "eval"), job.device)
    pair = same_start(job.reference, job.variant, job.task.vocab, settings, seed)
    models = {"reference": pair.reference.to(job.device), "variant": pair.variant.to(job.device)}
    init = {side: measure(models[side], probe, models["reference"] if side == "variant" else None) for side in SIDES}
    trained = {"reference": _trained_reference(models["reference"], job, evaluation, seed),
               "variant": _train_side(models["variant"], job, evaluation, seed)}
    end = {side: measure(models[side], probe, models["reference"] if side == "variant" else None) for side in SIDES}
    sides = {side: {**trained[side], "measures": {"0": init[side], str(settings.steps): end[side]}} for side in SIDES}
    for side in SIDES:
        sides[side]["summary"] = summary(sides[side], settings)
    return {"seed": seed, "loaded": pair.loaded, **sides}


def _trained_reference(model: GPTModel, job: Plan, evaluation: Batch, seed: int) -> dict[str, Any]:
    """The reference trained, or loaded from the sweep's cache when another job trained it already."""
    if job.cache is None:
        return _train_side(model, job, evaluation, seed)
    key = reference_cache.cache_key(asdict(job.settings), seed, job.reference.describe, job.device)
    cached = reference_cache.load(job.cache, key, model)
    if cached is not None:
        return {**cached, "from_cache": True}  # another job trained it (and wrote its TensorBoard run)
    side = _train_side(model, job, evaluation, seed)
    reference_cache.save(job.cache, key, side, model)
    return side


def _train_side(model: GPTModel, job: Plan, evaluation: Batch, seed: int) -> dict[str, Any]:
    evals: list[dict[str, float]] = []
    probes = HeadProbes(job.task, evaluation) if job.settings.head_probes else None

    def checkpoint(step: int) -> None:
        evals.append({"step": step, **evaluate(model, evaluation)})
        if probes is not None:
            probes.at(model, step)

    checkpoint(0)
    losses = train_loop(model, job.task, job.settings, seed, job.device, at_step=checkpoint)
    return {"losses": losses, "evals": evals, **(probes.recorded() if probes is not None else {})}


def summary(side: dict[str, Any], settings: TrainingConf) -> dict[str, float]:
    """The side's numbers the table pools: "steps to target" of a run that never got there is
    counted as one evaluation past the end."""
    evals, last = side["evals"], side["evals"][-1]
    reached = next((e["step"] for e in evals if e["causal_accuracy"] >= settings.target_accuracy), None)
    at_init, at_end = side["measures"]["0"], side["measures"][str(settings.steps)]
    pooled = {"final_train_loss": statistics.fmean(side["losses"][-10:]), "reached": float(reached is not None),
              "steps_to_target": float(reached if reached is not None else settings.steps + settings.eval_every),
              **{k: last[k] for k in ("teacher_forced_accuracy", "causal_accuracy", "causal_loss")}}
    for name, measures in (("init", at_init), ("end", at_end)):
        for what in ("max_weight", "entropy"):
            values = [v for k, v in measures["attention"].items() if k.endswith(what)]
            if values:
                pooled[f"{name}_{what}"] = statistics.fmean(values)
    if any("induction_max" in point for point in side.get("heads", [])):  # a seed whose heads never formed
        # counts as one evaluation past the end
        formed = induction_formed(side["heads"])
        pooled["induction_formed"] = float(formed is not None)
        pooled["steps_to_induction"] = formed if formed is not None else float(settings.steps + settings.eval_every)
    queries = [v for k, v in at_init["grad_norm"].items() if k.endswith("/queries")]
    if queries:
        pooled["init_query_grad_norm"] = statistics.fmean(queries)
    return pooled


def run(job: Plan, variant: str, seeds: Iterable[int]) -> TrainingResult:
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # one thread per process: two on busy shared cores cost many times the CPU
    try:
        per_seed = [run_seed(job, seed) for seed in seeds]
    finally:  # as found: a sweep's job worker whose torch defaults a job left changed is not used again
        torch.set_num_threads(threads)
    summaries = [{side: s[side]["summary"] for side in SIDES} for s in per_seed]
    table = rows(summaries)
    said = verdict(variant, table, summaries, job.settings.steps, job.settings.target_accuracy)
    return TrainingResult(variant, {"reference": job.reference.describe, "variant": job.variant.describe},
                          asdict(job.settings), per_seed, table, said)

