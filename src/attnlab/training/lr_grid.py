"""A learning-rate grid (`training.lr=[1e-3,3e-3,1e-2]`): each side trains at every rate per seed
and is compared at its own best rate, as Zoology compares models: a variant that needs another
rate than the reference's does not read as worse. The best rate of a side is the one of highest
mean final causal accuracy over the seeds (ties: the lower mean final training loss)."""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from typing import Any

SIDES = ("reference", "variant")
Summaries = Sequence[Mapping[str, Mapping[str, Any]]]  # per seed: {side: its summary}


def rates_of(lr: float | Sequence[float]) -> list[float]:
    return [float(rate) for rate in lr] if isinstance(lr, Sequence) and not isinstance(lr, str) else [float(lr)]


def best_rates(by_rate: Mapping[float, Summaries]) -> dict[str, float]:
    """{side: its best rate} from each rate's per-seed summaries."""
    def score(rate: float, side: str) -> tuple[float, float]:
        summaries = by_rate[rate]
        return (statistics.fmean(s[side]["causal_accuracy"] for s in summaries),
                -statistics.fmean(s[side]["final_train_loss"] for s in summaries))
    return {side: max(by_rate, key=lambda rate: score(rate, side)) for side in SIDES}


def at_best(by_rate: Mapping[float, Sequence[dict[str, Any]]]) -> list[dict[str, Any]]:
    """Per seed, each side's run at its best rate; `lr` names the rates, `grid` keeps every rate's summaries."""
    best = best_rates({rate: [{side: run[side]["summary"] for side in SIDES} for run in runs]
                       for rate, runs in by_rate.items()})
    first = next(iter(by_rate.values()))
    return [{"seed": run["seed"], "loaded": by_rate[best["variant"]][i]["loaded"], "lr": best,
             **{side: by_rate[best[side]][i][side] for side in SIDES},
             "grid": {str(rate): {side: runs[i][side]["summary"] for side in SIDES} for rate, runs in by_rate.items()}}
            for i, run in enumerate(first)]


def pooled(runs: Sequence[dict[str, Any]]) -> tuple[list[dict[str, Any]], dict[str, float] | None]:
    """The per-seed summaries a table pools, with the best rates chosen over all `runs` (a sweep's
    jobs each chose on their own seeds); without a grid, each run's own summaries and None."""
    if not runs or "grid" not in runs[0]:
        return [{side: run[side]["summary"] for side in SIDES} for run in runs], None
    by_rate = {float(rate): [run["grid"][rate] for run in runs] for rate in runs[0]["grid"]}
    best = best_rates(by_rate)
    return [{side: run["grid"][str(best[side])][side] for side in SIDES} for run in runs], best


def rate_sentence(variant: str, best: Mapping[str, float], rates: Sequence[float]) -> str:
    shown = ", ".join(f"{rate:g}" for rate in rates)
    return (f"learning rates {shown}, each side compared at its best (highest final causal accuracy): {variant} "
            f"best at {best['variant']:g}; the reference at {best['reference']:g}")


def grid_markdown(runs: Sequence[dict[str, Any]], variant: str) -> str:
    """Mean final causal accuracy per rate and side: what the best rates were chosen from."""
    if not runs or "grid" not in runs[0]:
        return ""
    lines = [f"| lr | reference causal accuracy | {variant} causal accuracy |", "|---|---|---|"]
    for rate in runs[0]["grid"]:
        means = [statistics.fmean(run["grid"][rate][side]["causal_accuracy"] for run in runs) for side in SIDES]
        lines.append(f"| {float(rate):g} | {means[0]:.3g} | {means[1]:.3g} |")
    return "\n".join(lines) + "\n"
