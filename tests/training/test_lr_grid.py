"""A learning-rate grid: each side trained at every rate, compared at its own best."""

import pytest


@pytest.mark.slow
def test_a_learning_rate_grid_compares_each_side_at_its_best_rate():
    from attnlab import train
    from tests.training._tiny import TINY_OVERRIDES
    from tests.training._verdict_check import best_rate, check

    grid = [*TINY_OVERRIDES, "training.steps=20", "training.eval_every=10", "log.terminal=false"]
    result = train("unscaled", "induction", seed=1, n_seeds=2, overrides=[*grid, "training.lr=[1e-3,3e-2]"])
    assert result.verdict[0].startswith("learning rates 0.001, 0.03, each side compared at its best")
    summaries = [{side: run[side]["summary"] for side in ("reference", "variant")} for run in result.seeds]
    assert "rates" in check(result.verdict, result.rows, summaries, result.seeds)
    best = best_rate(result.seeds, "reference")
    alone = train("unscaled", "induction", seed=1, n_seeds=2, overrides=[*grid, f"training.lr={best}"])
    assert [run["reference"]["losses"] for run in result.seeds] == [run["reference"]["losses"] for run in alone.seeds]
