"""Every sentence of a verdict read against its table, by rules written here from the guide (not
from attnlab's verdict code): a difference only on a clear row, in the row's direction, with the
row's numbers; "saturated" only from a largest weight of 0.5; one seed claims nothing."""

from __future__ import annotations

import math
import re

SATURATED = 0.5  # docs/guide/training.md, "The verdict"


def seeds_to_separate(row) -> int:
    """The smallest n with twice the standard error below the difference (the guide's power estimate)."""
    difference = abs(row.variant.mean - row.reference.mean)
    spread = row.reference.std ** 2 + row.variant.std ** 2
    return next(n for n in range(1, 100000) if 2 * math.sqrt(spread / n) < difference)


def every_seed_falls_short(summaries) -> bool:
    return (all(s["variant"]["teacher_forced_accuracy"] > s["variant"]["causal_accuracy"] for s in summaries)
            and all(s["reference"]["teacher_forced_accuracy"] == s["reference"]["causal_accuracy"] for s in summaries))


def best_rate(runs, side: str) -> float:
    """The rate of the highest mean final causal accuracy over the seeds, ties to the lower mean
    final training loss (the guide's choice)."""
    def mean(rate: str, measure: str) -> float:
        return sum(run["grid"][rate][side][measure] for run in runs) / len(runs)
    return float(max(runs[0]["grid"], key=lambda rate: (mean(rate, "causal_accuracy"), -mean(rate, "final_train_loss"))))


def check(sentences: list[str], table, summaries, runs=None) -> list[str]:
    """The kinds of the sentences, each checked (AssertionError on the first that its table contradicts);
    `runs`: the result's seeds, for a learning-rate grid's sentence."""
    by = {row.measure: row for row in table}
    by_what = {row.what: row for row in table}
    n, kinds = len(summaries), []
    for sentence in sentences:
        steps = by.get("steps_to_target")
        if sentence.startswith("learning rates "):
            named = re.search(r"best at ([\d.e-]+); the reference at ([\d.e-]+)$", sentence)
            assert float(named.group(1)) == best_rate(runs, "variant"), sentence
            assert float(named.group(2)) == best_rate(runs, "reference"), sentence
            kinds.append("rates")
        elif sentence.startswith("one seed:"):
            assert n == 1 and not any(row.clear for row in table), sentence
            kinds.append("one seed")
        elif "no difference from the reference stands clear" in sentence:
            assert n > 1 and not any(row.clear for row in table), sentence
            kinds.append("no difference")
        elif sentence.startswith("within seed noise: "):
            for part in sentence.removeprefix("within seed noise: ").split("; "):
                row = next(r for what, r in by_what.items() if part.startswith(what + " "))
                assert not row.clear and f"{row.variant} vs {row.reference}" in part, part
                assert f"about {seeds_to_separate(row)} seeds" in part, (part, seeds_to_separate(row))
            kinds.append("within noise")
        elif "sees future tokens" in sentence:
            loss, causal = by["final_train_loss"], by["causal_accuracy"]
            by_rows = (loss.clear and loss.variant.mean < loss.reference.mean and causal.clear
                       and causal.variant.mean < causal.reference.mean)
            assert by_rows or (n > 1 and every_seed_falls_short(summaries)), sentence
            if sentence.startswith("the variant's training loss is lower"):
                assert loss.clear and loss.variant.mean < loss.reference.mean, sentence
            assert f"causal accuracy {causal.variant} vs {causal.reference}" in sentence
            kinds.append("leak")
        elif "at init its softmax was" in sentence:
            row = by["init_max_weight"]
            assert row.clear and f"largest weight {row.variant} vs {row.reference}" in sentence, sentence
            higher = row.variant.mean > row.reference.mean
            if "saturated:" in sentence:
                assert higher and row.variant.mean >= SATURATED, sentence
            elif "sharper" in sentence:
                assert higher and row.variant.mean < SATURATED, sentence
            else:
                assert "flatter" in sentence and not higher, sentence
            if "entropy" in sentence.split("(saturated from")[1]:
                assert by["init_entropy"].clear, sentence
            kinds.append(re.search(r"was (\w+)", sentence).group(1))
        elif re.search(r"causal accuracy (faster|slower)", sentence):
            assert steps.clear and all(s["variant"]["reached"] and s["reference"]["reached"] for s in summaries)
            apart = [s["variant"]["steps_to_target"] - s["reference"]["steps_to_target"] for s in summaries]
            faster = "faster" in sentence
            assert all(d < 0 for d in apart) if faster else all(d > 0 for d in apart), (sentence, apart)
            assert "evaluated every" in sentence
            kinds.append("pace")
        elif re.search(r"reached \d+% causal accuracy in only", sentence):
            assert steps.clear and sum(s["variant"]["reached"] for s in summaries) < sum(
                s["reference"]["reached"] for s in summaries), sentence
            kinds.append("fewer seeds")
        elif re.search(r"did not reach \d+% causal accuracy", sentence):
            assert steps.clear and not any(s["variant"]["reached"] for s in summaries), sentence
            assert all(s["reference"]["reached"] for s in summaries), sentence
            kinds.append("never")
        elif sentence.startswith("induction heads ("):
            # a fact per seed, no difference claimed: each side's steps are the seeds' own, `never` where none formed
            for side, said in zip(("reference", "variant"), re.findall(r"'s (formed at steps? [^;]+|never formed in \d+ steps)", sentence)):
                seeds = [s[side]["steps_to_induction"] if s[side]["induction_formed"] else None for s in summaries]
                if said.startswith("never"):
                    assert not any(v is not None for v in seeds), (sentence, side, seeds)
                else:
                    listed = [None if v == "never" else float(v) for v in re.split(r", ", said.split(" ", 3)[3])]
                    assert listed == seeds, (sentence, side, seeds)
            kinds.append("induction heads")
        elif "the reference did not in" in sentence:
            assert steps.clear and all(s["variant"]["reached"] for s in summaries), sentence
            assert not any(s["reference"]["reached"] for s in summaries), sentence
            kinds.append("only the variant")
        else:
            row = next((r for what, r in by_what.items() if sentence.startswith(what + ": ")), None)
            assert row is not None, f"a sentence no rule reads: {sentence}"
            way = "higher" if row.variant.mean > row.reference.mean else "lower"
            assert row.clear and sentence == f"{row.what}: {way}, {row.variant} against the reference's {row.reference}"
            kinds.append("difference")
    return kinds
