"""Seeds pooled into mean ± std per measure, which differences stand clear of seed noise, and the
verdict in words. A difference is clear when it exceeds twice its standard error over the seeds
and a floor of its own; with one seed there is no noise estimate and the verdict says so."""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from attnlab.training.head_probes import formation_sentence

# measure: (its floor: a smaller difference says nothing, a fraction of the reference's mean for
# RELATIVE_FLOORS, else absolute (accuracies and entropies are fractions already); what it is).
MEASURES: dict[str, tuple[float, str]] = {
    "steps_to_target": (0.0, "steps to the target causal accuracy"),
    "final_train_loss": (0.1, "training loss at the end"),
    "teacher_forced_accuracy": (0.03, "teacher-forced accuracy at the end"),
    "causal_accuracy": (0.03, "causal accuracy at the end"),
    "causal_loss": (0.1, "causal loss at the end"),
    "init_max_weight": (0.05, "largest attention weight at init"),
    "init_entropy": (0.05, "attention entropy at init, of uniform"),
    "end_entropy": (0.05, "attention entropy at the end, of uniform"),
    "init_query_grad_norm": (0.1, "gradient norm reaching W_query at init"),
    "steps_to_induction": (0.0, "steps to an induction head (score above 0.4)"),
}
REACHED = {"steps_to_target": "reached", "steps_to_induction": "induction_formed"}  # "steps to": whether each seed got there
RELATIVE_FLOORS = ("final_train_loss", "causal_loss", "init_query_grad_norm")


@dataclass(frozen=True)
class Stat:
    values: tuple[float, ...]

    @property
    def mean(self) -> float:
        return statistics.fmean(self.values)

    @property
    def std(self) -> float:
        return statistics.stdev(self.values) if len(self.values) > 1 else 0.0

    def __str__(self) -> str:
        return f"{_short(self.mean)}±{_short(self.std)}" if len(self.values) > 1 else _short(self.mean)


def _short(value: float) -> str:
    return f"{value:.0f}" if abs(value) >= 10 else f"{value:.3g}"


def clear(reference: Stat, variant: Stat, floor: float) -> bool:
    """Whether the difference of the means stands clear of seed noise (twice its standard error)
    and of the measure's floor."""
    difference = abs(variant.mean - reference.mean)
    n = min(len(reference.values), len(variant.values))
    noise = 2 * math.sqrt((reference.std ** 2 + variant.std ** 2) / n)
    return difference > max(noise, floor)


@dataclass(frozen=True)
class Row:
    measure: str
    what: str
    reference: Stat
    variant: Stat
    clear: bool
    shown: tuple[str, str] = ("", "")  # how the table shows each side, where not its Stat

    def as_dict(self) -> dict[str, Any]:
        return {"measure": self.measure, "what": self.what, "reference": self.shown[0] or str(self.reference),
                "variant": self.shown[1] or str(self.variant), "reference_mean": self.reference.mean, "reference_std": self.reference.std,
                "variant_mean": self.variant.mean, "variant_std": self.variant.std, "clear_of_seed_noise": self.clear}


def rows(summaries: Sequence[dict[str, dict[str, float]]]) -> list[Row]:
    """One row per measure from each seed's {"reference": {...}, "variant": {...}} summary."""
    table = []
    for measure, (floor, what) in MEASURES.items():
        reference = Stat(tuple(s["reference"][measure] for s in summaries if measure in s["reference"]))
        variant = Stat(tuple(s["variant"][measure] for s in summaries if measure in s["variant"]))
        if reference.values and variant.values:
            floor = floor * abs(reference.mean) if measure in RELATIVE_FLOORS else floor
            shown = (_reached(summaries, "reference", reference, REACHED[measure]),
                     _reached(summaries, "variant", variant, REACHED[measure])) if measure in REACHED else ("", "")
            table.append(Row(measure, what, reference, variant, clear(reference, variant, floor), shown))
    return table


def _reached(summaries: Sequence[dict[str, dict[str, float]]], side: str, stat: Stat, flag: str = "reached") -> str:
    """Steps to the target as the table shows them: `never` where no seed got there."""
    reached = sum(s[side][flag] for s in summaries)
    if reached == 0:
        return "never"
    return str(stat) if reached == len(summaries) else f"{stat} ({reached:.0f} of {len(summaries)} reached it)"


def verdict(variant: str, table: Sequence[Row], summaries: Sequence[dict[str, dict[str, float]]],
            steps: int, target: float) -> list[str]:
    """The verdict's sentences; nothing about a difference within seed noise."""
    by = {row.measure: row for row in table}
    said = [s for s in (_target(variant, by, summaries, steps, target), _saturation(by), _leak(by, summaries)) if s]
    if not any("causal evaluation fails" in s or "did not" in s for s in said):  # said already
        said += [s for s in (_accuracy(by),) if s]
    n = len(summaries)
    formed = formation_sentence(variant, list(summaries), steps)
    if not said:
        said = [f"{variant}: no difference from the reference stands clear of seed noise over {n} seed{'s' * (n > 1)}"]
    if formed is not None:
        said.append(formed)
    if n == 1:
        said.append("one seed: no estimate of seed noise (n_seeds=3 gives one)")
    return said


def _target(variant: str, by: dict[str, Row], summaries: Sequence[dict], steps: int, target: float) -> str | None:
    row = by.get("steps_to_target")
    if row is None:
        return None
    reached = {side: sum(s[side]["reached"] for s in summaries) for side in ("reference", "variant")}
    pct = f"{target:.0%}"
    if reached["variant"] == 0 and reached["reference"] == len(summaries):
        return (f"{variant} did not reach {pct} causal accuracy in {steps} steps "
                f"(reference: {row.reference} steps); its final causal accuracy {by['causal_accuracy'].variant}")
    if reached["reference"] == 0 and reached["variant"] == len(summaries):
        return (f"{variant} reached {pct} causal accuracy in {row.variant} steps; the reference did not in {steps} "
                f"(its final causal accuracy {by['causal_accuracy'].reference})")
    n = len(summaries)
    if row.clear and reached["variant"] < reached["reference"]:
        return (f"{variant} reached {pct} causal accuracy in only {reached['variant']:.0f} of {n} seeds, and later: "
                f"{row.variant} steps (a seed that never did counted as {steps} plus one evaluation) against the "
                f"reference's {row.reference} ({reached['reference']:.0f} of {n})")
    if row.clear and reached["variant"] == reached["reference"] == n:
        pace = "slower" if row.variant.mean > row.reference.mean else "faster"
        return f"{variant} reached {pct} causal accuracy {pace}: {row.variant} steps against the reference's {row.reference}"
    return None


def _saturation(by: dict[str, Row]) -> str | None:
    largest, entropy = by.get("init_max_weight"), by.get("init_entropy")
    if largest is None or entropy is None or not (largest.clear or entropy.clear):
        return None
    sharper = ((largest.clear and largest.variant.mean > largest.reference.mean)
               or (entropy.clear and entropy.variant.mean < entropy.reference.mean))
    state = "saturated" if sharper else "flatter than the reference's"
    return (f"at init its softmax was {state}: largest weight {_short(largest.variant.mean)} vs "
            f"{_short(largest.reference.mean)}, entropy {_short(entropy.variant.mean)} vs "
            f"{_short(entropy.reference.mean)} of uniform")


def _leak(by: dict[str, Row], summaries: Sequence[dict[str, dict[str, float]]]) -> str | None:
    """A model that reads future tokens: its causal accuracy falls short of its teacher-forced one.
    That is no matter of seed noise: a causal model's two evaluations agree exactly, so a shortfall
    on every seed where the reference's agree on every seed is the leak itself."""
    loss, causal = by["final_train_loss"], by["causal_accuracy"]
    teacher = by["teacher_forced_accuracy"]
    lower = loss.clear and loss.variant.mean < loss.reference.mean
    fails = lower and causal.clear and causal.variant.mean < causal.reference.mean
    if not fails and len(summaries) > 1:
        fails = all(_shortfall(s["variant"]) > 0 for s in summaries) and not any(_shortfall(s["reference"])
                                                                                 for s in summaries)
    if not fails:
        return None
    opening = f"the variant's training loss is lower ({loss.variant} vs {loss.reference}) but its causal " \
        if lower else "its causal "
    return (f"{opening}evaluation fails: it sees future tokens (causal accuracy {causal.variant} vs {causal.reference}, "
            f"teacher-forced {teacher.variant}; below its teacher-forced accuracy on every seed, where the "
            f"reference's two agree)")


def _shortfall(side: dict[str, float]) -> float:
    """How far the causal accuracy falls below the teacher-forced one (0 for a causal model)."""
    return side["teacher_forced_accuracy"] - side["causal_accuracy"]


def _accuracy(by: dict[str, Row]) -> str | None:
    row = by["causal_accuracy"]
    if not row.clear:
        return None
    return f"final causal accuracy {row.variant} against the reference's {row.reference}"
