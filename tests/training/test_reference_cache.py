"""A sweep's jobs share the trained reference: the second job loads what the first trained, and
its result equals one trained from scratch."""

import pytest

from attnlab.training import job as training
from attnlab.training.job import plan, run_seed
from tests.training._tiny import tiny


def test_a_cached_reference_gives_the_result_of_one_trained_again(tmp_path, monkeypatch):
    settings = tiny(steps=20, eval_every=10)
    fresh = run_seed(plan("unscaled", settings), seed=4)
    run_seed(plan("causal_mask_missing", settings, cache=tmp_path), seed=4)  # trains the reference, keeps it
    trained = []
    original = training._train_side
    monkeypatch.setattr(training, "_train_side", lambda model, *args: trained.append(model) or original(model, *args))
    cached = run_seed(plan("unscaled", settings, cache=tmp_path), seed=4)
    assert len(trained) == 1  # the variant only
    assert cached["reference"]["losses"] == fresh["reference"]["losses"]
    assert cached["reference"]["evals"] == fresh["reference"]["evals"]
    cached_summary, fresh_summary = cached["variant"]["summary"], fresh["variant"]["summary"]
    assert cached_summary.pop("not_measured") == fresh_summary.pop("not_measured")
    assert cached_summary == pytest.approx(fresh_summary)
    end = str(settings.steps)
    assert cached["reference"]["measures"][end]["grad_norm"] == pytest.approx(fresh["reference"]["measures"][end]["grad_norm"])
