"""Seeds pooled into mean ± std per measure, which differences stand clear of seed noise, and the
verdict in words, every sentence read off the table: a difference is said only where its row is
clear (twice its standard error over the seeds and a floor of its own; steps to the target also
apart by at least one evaluation on every seed, the evaluation grid's resolution); with one seed
nothing is clear and the verdict says so; a measure that does not apply to the variant is "not
measured" with why."""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from attnlab.training.head_probes import formation_sentence
from attnlab.training.lr_grid import pooled, rate_sentence, rates_of

NOT_MEASURED = "not_measured"  # a side's summary: {measure: why it does not apply} (attnlab.training.measures)
SATURATED = 0.5  # "saturated": a row's largest weight, on average, at least this (half the row on one key)

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
# "steps to" measures, read at evaluations (apart by one on every seed, or not clear): whether each seed got there
REACHED = {"steps_to_target": "reached", "steps_to_induction": "induction_formed"}
RELATIVE_FLOORS = ("final_train_loss", "causal_loss", "init_query_grad_norm")


@dataclass(frozen=True)
class Stat:
    values: tuple[float, ...]

    @property
    def mean(self) -> float:
        return statistics.fmean(self.values) if self.values else math.nan

    @property
    def std(self) -> float:
        return statistics.stdev(self.values) if len(self.values) > 1 else 0.0

    def __str__(self) -> str:
        if not self.values:
            return "not measured"
        return f"{_short(self.mean)}±{_short(self.std)}" if len(self.values) > 1 else _short(self.mean)


def _short(value: float) -> str:
    return f"{value:.0f}" if abs(value) >= 10 else f"{value:.3g}"


def _noise(reference: Stat, variant: Stat) -> float:
    """Twice the standard error of the difference of the means."""
    n = min(len(reference.values), len(variant.values))
    return 2 * math.sqrt((reference.std ** 2 + variant.std ** 2) / n)


def clear(reference: Stat, variant: Stat, floor: float) -> bool:
    """Whether the difference of the means stands clear of seed noise (twice its standard error)
    and of the measure's floor; never with one seed (no estimate of the noise)."""
    if min(len(reference.values), len(variant.values)) < 2:
        return False
    return abs(variant.mean - reference.mean) > max(_noise(reference, variant), floor)


def seeds_to_separate(reference: Stat, variant: Stat, floor: float) -> int | None:
    """How many seeds would put twice the standard error below the observed difference, were the
    means and spreads what these seeds show (None: the difference is below the floor, or no spread)."""
    difference = abs(variant.mean - reference.mean)
    spread = reference.std ** 2 + variant.std ** 2
    if difference <= floor or spread == 0 or len(reference.values) < 2:
        return None
    return math.floor(4 * spread / difference ** 2) + 1


@dataclass(frozen=True)
class Row:
    measure: str
    what: str
    reference: Stat
    variant: Stat
    clear: bool
    shown: tuple[str, str] = ("", "")  # how the table shows each side, where not its Stat
    note: str = ""  # why no clear/not-clear answer: one seed, not measured, the evaluation grid
    seeds_needed: int | None = None  # a difference within noise: seeds that would separate it

    @property
    def noise(self) -> str:
        """The table's "clear of seed noise" cell."""
        return self.note or ("yes" if self.clear else "no")

    def as_dict(self) -> dict[str, Any]:
        return {"measure": self.measure, "what": self.what, "reference": self.shown[0] or str(self.reference),
                "variant": self.shown[1] or str(self.variant), "reference_mean": self.reference.mean,
                "reference_std": self.reference.std, "variant_mean": self.variant.mean, "variant_std": self.variant.std,
                "clear_of_seed_noise": self.clear, "noise": self.noise, "seeds_to_separate": self.seeds_needed}


def rows(summaries: Sequence[dict[str, dict[str, Any]]], resolution: int | None = None) -> list[Row]:
    """One row per measure from each seed's {"reference": {...}, "variant": {...}} summary;
    `resolution`: the steps between evaluations (steps to the target are read on that grid)."""
    table = []
    for measure, (floor, what) in MEASURES.items():
        reference = Stat(tuple(s["reference"][measure] for s in summaries if measure in s["reference"]))
        variant = Stat(tuple(s["variant"][measure] for s in summaries if measure in s["variant"]))
        if not (reference.values or variant.values):
            continue
        if not (reference.values and variant.values):
            table.append(Row(measure, what, reference, variant, False, note=f"not measured: {_why(summaries, measure)}"))
            continue
        floor = floor * abs(reference.mean) if measure in RELATIVE_FLOORS else floor
        shown = (_reached(summaries, "reference", reference, REACHED[measure]),
                 _reached(summaries, "variant", variant, REACHED[measure])) if measure in REACHED else ("", "")
        is_clear, note = clear(reference, variant, floor), ""
        needed = None if is_clear else seeds_to_separate(reference, variant, floor)
        if len(summaries) == 1:
            note = "one seed: not estimated"
        elif measure in REACHED and resolution and is_clear and not _apart_on_every_seed(reference, variant):
            # clear of the noise, below the grid's resolution: more seeds would not say more
            is_clear, note = False, f"no: within one evaluation (every {resolution} steps) on some seed"
        table.append(Row(measure, what, reference, variant, is_clear, shown, note, needed))
    return table


def _why(summaries: Sequence[dict[str, dict[str, Any]]], measure: str) -> str:
    for side in ("variant", "reference"):
        for s in summaries:
            why = s[side].get(NOT_MEASURED, {}).get(measure)
            if why:
                return f"{side}: {why}" if side == "reference" else why
    return "not taken"


def _apart_on_every_seed(reference: Stat, variant: Stat) -> bool:
    """Steps to the target on every seed at least one evaluation apart, all in one direction: a
    smaller difference is below the grid's resolution."""
    signs = {math.copysign(1, v - r) if v != r else 0 for r, v in zip(reference.values, variant.values)}
    return len(signs) == 1 and 0 not in signs


def _reached(summaries: Sequence[dict[str, dict[str, Any]]], side: str, stat: Stat, flag: str = "reached") -> str:
    """Steps to the target as the table shows them: `never` where no seed got there."""
    reached = sum(s[side][flag] for s in summaries)
    if reached == 0:
        return "never"
    return str(stat) if reached == len(summaries) else f"{stat} ({reached:.0f} of {len(summaries)} reached it)"


def uniform_largest(context_length: int) -> float:
    """A uniform causal row's largest weight, averaged over the rows that see 2 to T keys."""
    return statistics.fmean(1 / k for k in range(2, context_length + 1))


def verdict(variant: str, table: Sequence[Row], summaries: Sequence[dict[str, dict[str, Any]]],
            steps: int, target: float, eval_every: int | None = None, context_length: int | None = None) -> list[str]:
    """The verdict's sentences, each read off a clear row of `table` (a leak off every seed's pair of
    evaluations); what is within seed noise is named with the seeds that would separate it."""
    by = {row.measure: row for row in table}
    n = len(summaries)
    said: list[tuple[str, set[str]]] = [s for s in (
        _target(variant, by, summaries, steps, target, eval_every), _saturation(by, context_length),
        _leak(by, summaries)) if s]
    covered = set().union(*(measures for _, measures in said)) if said else set()
    said += [(_difference(row), {row.measure}) for row in table if row.clear and row.measure not in covered]
    sentences = [text for text, _ in said]
    formed = formation_sentence(variant, list(summaries), steps)  # each seed's step, a fact of its own
    sentences += [formed] if formed is not None else []
    if n == 1:
        return [*sentences, "one seed: seed noise is not estimated, so no difference is claimed (n_seeds=3 gives an "
                            "estimate)"]
    if not sentences:
        sentences = [f"{variant}: no difference from the reference stands clear of seed noise over {n} seeds"]
    within = [row for row in table if not row.clear and row.seeds_needed is not None and row.measure not in covered]
    if within:
        sentences.append("within seed noise: " + "; ".join(
            f"{row.what} {row.variant} vs {row.reference} (about {row.seeds_needed} seeds would separate it, were "
            f"the difference and the spread these)" for row in within))
    return sentences


def judged(variant: str, runs: Sequence[dict[str, Any]], settings: dict[str, Any]) -> tuple[list[Row], list[str]]:
    """The table and the verdict of per-seed `runs` (a job's, or a sweep's jobs' pooled) under
    `settings` (a TrainingConf as a dict); with a learning-rate grid, each side at its best rate."""
    summaries, best = pooled(runs)
    table = rows(summaries, settings["eval_every"])
    said = verdict(variant, table, summaries, settings["steps"], settings["target_accuracy"], settings["eval_every"],
                   settings["model"]["context_length"])
    if best is not None:
        said.insert(0, rate_sentence(variant, best, rates_of(settings["lr"])))
    return table, said


def _difference(row: Row) -> str:
    way = "higher" if row.variant.mean > row.reference.mean else "lower"
    return f"{row.what}: {way}, {row.variant} against the reference's {row.reference}"


def _target(variant: str, by: dict[str, Row], summaries: Sequence[dict[str, Any]], steps: int, target: float,
            eval_every: int | None) -> tuple[str, set[str]] | None:
    row = by.get("steps_to_target")
    if row is None or not row.clear:
        return None
    reached = {side: sum(s[side]["reached"] for s in summaries) for side in ("reference", "variant")}
    pct, n, accuracy = f"{target:.0%}", len(summaries), by["causal_accuracy"]
    if reached["variant"] == 0 and reached["reference"] == n:
        return (f"{variant} did not reach {pct} causal accuracy in {steps} steps (reference: {row.reference} steps); "
                f"its final causal accuracy {accuracy.variant}", {row.measure, accuracy.measure})
    if reached["reference"] == 0 and reached["variant"] == n:
        return (f"{variant} reached {pct} causal accuracy in {row.variant} steps; the reference did not in {steps} "
                f"(its final causal accuracy {accuracy.reference})", {row.measure, accuracy.measure})
    if reached["variant"] < reached["reference"]:
        return (f"{variant} reached {pct} causal accuracy in only {reached['variant']:.0f} of {n} seeds, and later: "
                f"{row.variant} steps (a seed that never did counted as {steps} plus one evaluation) against the "
                f"reference's {row.reference} ({reached['reference']:.0f} of {n})", {row.measure})
    if reached["variant"] == reached["reference"] == n:
        pace = "slower" if row.variant.mean > row.reference.mean else "faster"
        grid = f" (evaluated every {eval_every} steps; every seed at least one evaluation apart)" if eval_every else ""
        return (f"{variant} reached {pct} causal accuracy {pace}: {row.variant} steps against the reference's "
                f"{row.reference}{grid}", {row.measure})
    return None


def _saturation(by: dict[str, Row], context_length: int | None) -> tuple[str, set[str]] | None:
    """The largest weight at init, where its row is clear: "saturated" at SATURATED and above,
    else sharper or flatter than the reference's; the entropy beside it where its row is clear too."""
    largest, entropy = by.get("init_max_weight"), by.get("init_entropy")
    if largest is None or not largest.clear:
        return None
    higher = largest.variant.mean > largest.reference.mean
    state = ("saturated" if largest.variant.mean >= SATURATED else "sharper than the reference's") if higher \
        else "flatter than the reference's"
    uniform = f"; a uniform causal row's {_short(uniform_largest(context_length))}" if context_length else ""
    text = (f"at init its softmax was {state}: largest weight {largest.variant} vs {largest.reference} (saturated "
            f"from {SATURATED}{uniform})")
    if entropy is not None and entropy.clear:
        return f"{text}, entropy {entropy.variant} vs {entropy.reference} of uniform", {largest.measure, entropy.measure}
    return text, {largest.measure}


def _leak(by: dict[str, Row], summaries: Sequence[dict[str, dict[str, Any]]]) -> tuple[str, set[str]] | None:
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
            f"reference's two agree)", {loss.measure, causal.measure, teacher.measure} if lower
            else {causal.measure, teacher.measure})


def _shortfall(side: dict[str, float]) -> float:
    """How far the causal accuracy falls below the teacher-forced one (0 for a causal model)."""
    return side["teacher_forced_accuracy"] - side["causal_accuracy"]
