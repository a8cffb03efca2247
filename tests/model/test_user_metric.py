"""A metric of one's own (`intervene.metric`): its value in the record's effect and the terminal's line
equals the same measure computed by hand on the model's own logits; a metric that cannot be imported
is one line before the model loads, one that raises fails its record in one line naming it."""

from __future__ import annotations

import csv
import sys

import pytest
import torch

import attnlab
from attnlab.errors import UserError
from attnlab.model.interventions import intervention
from attnlab.sinks.model_lines import layer_lines, layer_table
from tests.model.by_hand import eager_model, zero_head
from tests.model.conftest import TEXT
from tests.model.test_edit_checks import never_loaded  # noqa: F401 - a fixture

QUIET = ["log.tensorboard=false", "log.html=false", "log.table=false"]
METRIC_FILE = '''
def mean_abs_logit_change(logits_before, logits_after, token_ids):
    return (logits_after - logits_before).abs().mean()
'''


def mean_abs_logit_change(logits_before, logits_after, token_ids):
    """(T, vocab), (T, vocab), (T,) -> the mean |change| of the logits."""
    assert logits_before.shape == logits_after.shape and token_ids.shape == logits_before.shape[:1]
    return (logits_after - logits_before).abs().mean()


def _by_hand(model, ids: torch.Tensor, layer: int, head: int) -> float:
    """The mean |Δ logits| of head `head` of layer `layer` zeroed by a hook on c_proj's input."""
    proj = model.transformer.h[layer].attn.c_proj
    with torch.no_grad():
        base = model(input_ids=ids, use_cache=False).logits[0]  # (T, vocab)
        hook = proj.register_forward_pre_hook(lambda _m, args: (zero_head(head)(args[0]),))
        changed = model(input_ids=ids, use_cache=False).logits[0]  # (T, vocab)
        hook.remove()
    return float((changed.double() - base.double()).abs().mean())


def _run(folder, **intervene):
    overrides = [f"model.path={folder}", "inputs=text", f"inputs.text='{TEXT}'", "layer=1", *QUIET]
    return attnlab.run(overrides=overrides, intervene={"name": "ablate_head", "head": 2, **intervene}).record


def test_a_callable_metric_equals_the_measure_by_hand_and_shows(tiny_gpt2) -> None:
    model, ids, _ = eager_model(tiny_gpt2)
    hand = _by_hand(model, ids, 1, 2)
    record = _run(tiny_gpt2, metric=mean_abs_logit_change)
    assert record.status == "ok", record.error
    assert hand > 1e-3
    assert record.model.effect.metrics == {"mean_abs_logit_change": pytest.approx(hand, rel=1e-5)}
    assert record.variant.diagnostics["effect_mean_abs_logit_change"] == pytest.approx(hand, rel=1e-5)
    assert f"· mean_abs_logit_change {hand:.4g}" in "\n".join(layer_lines(record))
    header, row = layer_table([record])
    assert row[header.index("mean_abs_logit_change")] == f"{hand:.4g}"


def test_a_metric_from_a_file_path(tiny_gpt2, tmp_path) -> None:
    (tmp_path / "measures.py").write_text(METRIC_FILE)
    model, ids, _ = eager_model(tiny_gpt2)
    record = _run(tiny_gpt2, metric=f"{tmp_path / 'measures.py'}:mean_abs_logit_change")
    assert record.model.effect.metrics["mean_abs_logit_change"] == pytest.approx(_by_hand(model, ids, 1, 2), rel=1e-5)


def test_a_metric_from_a_module_in_the_working_folder(tiny_gpt2, tmp_path, monkeypatch) -> None:
    (tmp_path / "my_measures.py").write_text(METRIC_FILE)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", str(tmp_path))])
    monkeypatch.delitem(sys.modules, "my_measures", raising=False)
    model, ids, _ = eager_model(tiny_gpt2)
    record = _run(tiny_gpt2, metric="my_measures:mean_abs_logit_change")
    assert record.model.effect.metrics["mean_abs_logit_change"] == pytest.approx(_by_hand(model, ids, 1, 2), rel=1e-5)


@pytest.mark.parametrize("spec, message", [
    ("no_such_module_here:fn", r"^intervene.metric=no_such_module_here:fn: cannot import no_such_module_here "
                               r"\(ModuleNotFoundError: No module named 'no_such_module_here'\)$"),
    ("missing/file.py:fn", r"^intervene.metric=missing/file.py:fn: no file missing/file.py \(fn\(logits_before, "),
    ("math:no_such_function", r"^intervene.metric=math:no_such_function: math has no callable no_such_function "),
    ("no_colon", r"^intervene.metric=no_colon: name a callable as MODULE:NAME or path/to/file.py:NAME "),
])
def test_a_bad_metric_is_refused_in_one_line_before_the_model_loads(never_loaded, tiny_gpt2, spec, message) -> None:  # noqa: F811
    with pytest.raises(UserError, match=message) as raised:
        _run(tiny_gpt2, metric=spec)
    assert "\n" not in str(raised.value)


def test_a_metric_with_nothing_to_measure_or_a_taken_name_is_refused() -> None:
    with pytest.raises(UserError, match="^intervene.metric=math:fabs: intervene=observe changes nothing"):
        intervention({"name": "observe", "metric": "math:fabs"})

    def kl_mean(before, after, ids):
        return 0.0

    from attnlab.model.user_callables import register
    with pytest.raises(UserError, match=r"its name kl_mean is one of the effect's own"):
        intervention({"name": "ablate_head", "head": 0, "metric": register(kl_mean)})


def test_a_metric_that_raises_fails_its_record_in_one_line(tiny_gpt2) -> None:
    def broken(before, after, ids):
        raise ValueError("no good\nsecond line")

    record = _run(tiny_gpt2, metric=broken)
    assert record.status == "failed"
    assert record.error.startswith("intervene.metric=session:broken_") and "raised ValueError: no good" in record.error
    assert "\n" not in record.error


@pytest.mark.slow
def test_the_command_line_takes_a_metric_by_module_and_refuses_a_bad_one(app, tiny_gpt2, tmp_path) -> None:
    (tmp_path / "measures.py").write_text(METRIC_FILE)
    words = [f"model.path={tiny_gpt2}", "inputs=text", f"inputs.text='{TEXT}'", "layer=1", "intervene=ablate_head",
             "intervene.head=2", "log.tensorboard=false", "log.html=false"]
    done = app(*words, "intervene.metric=measures:mean_abs_logit_change")
    assert done.returncode == 0, done.stderr
    model, ids, _ = eager_model(tiny_gpt2)
    hand = _by_hand(model, ids, 1, 2)
    assert done.record["model"]["effect"]["metrics"]["mean_abs_logit_change"] == pytest.approx(hand, rel=1e-5)
    assert f"mean_abs_logit_change {hand:.4g}" in done.stdout
    with (done.out_dir / "comparison.csv").open() as table:
        variant = next(row for row in csv.DictReader(table) if row["module"] == "variant")
    assert float(variant["effect_mean_abs_logit_change"]) == pytest.approx(hand, rel=1e-5)
    refused = app(*words, "intervene.metric=measures:nothing_here", out="refused")
    assert refused.returncode == 2
    assert refused.stderr.strip().splitlines() == [
        "attnlab: error: intervene.metric=measures:nothing_here: measures has no callable nothing_here "
        "(fn(logits_before, logits_after, token_ids) -> float, logits (T, vocab), token ids (T,))"]
