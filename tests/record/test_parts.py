"""A record is built once, by `record_of`, from the values its steps returned: read from the source
(ast), no other place in attnlab constructs one (but the codec's reader, from JSON), and no step
that produces its parts (compute, model, diagnosis) makes a changed copy of one."""

from __future__ import annotations

import ast
from dataclasses import fields
from pathlib import Path

import numpy as np
import pytest

from attnlab.record import Diagnosis, Effect, Finding, ModelInfo, Pair, Record, Setup, Side, record_of

SRC = Path(__file__).resolve().parents[2] / "src" / "attnlab"
BUILDERS = {("record/parts.py", "record_of"), ("record/codec.py", "from_json_dict")}  # the reader: JSON to a record
PRODUCERS = ("compute", "model", "diagnosis")


def _modules() -> dict[str, ast.Module]:
    return {path.relative_to(SRC).as_posix(): ast.parse(path.read_text(), str(path)) for path in SRC.rglob("*.py")}


def _called(call: ast.Call) -> str | None:
    """The called name: `Record` for Record(...) and record.Record(...)."""
    return call.func.id if isinstance(call.func, ast.Name) else getattr(call.func, "attr", None)


def _functions(tree: ast.Module) -> list[ast.FunctionDef | ast.AsyncFunctionDef]:
    return [node for node in ast.walk(tree) if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))]


def _is_record(annotation: ast.expr | None) -> bool:
    """`Record`, `record.Record`, `"Record"` or any of them `| None`; not a list of records."""
    if isinstance(annotation, ast.BinOp):
        return _is_record(annotation.left) or _is_record(annotation.right)
    if isinstance(annotation, ast.Constant) and isinstance(annotation.value, str):
        return _is_record(ast.parse(annotation.value, mode="eval").body)
    return getattr(annotation, "id", getattr(annotation, "attr", None)) == "Record"


def _record_makers(modules: dict[str, ast.Module]) -> set[str]:
    """Record itself and every function of attnlab that returns one."""
    return {"Record"} | {f.name for tree in modules.values() for f in _functions(tree) if _is_record(f.returns)}


def _record_names(function: ast.FunctionDef | ast.AsyncFunctionDef, makers: set[str]) -> set[str]:
    """The names that hold a record in `function`: `record` (attnlab's name for one, a loop's too),
    its parameters typed Record, the names a record is assigned to."""
    arguments = function.args
    names = {"record"} | {a.arg for a in [*arguments.posonlyargs, *arguments.args, *arguments.kwonlyargs]
                          if _is_record(a.annotation)}
    for node in ast.walk(function):
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call) and _called(node.value) in makers:
            names |= {t.id for t in node.targets if isinstance(t, ast.Name)}
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and _is_record(node.annotation):
            names.add(node.target.id)
    return names


def records_constructed(modules: dict[str, ast.Module]) -> list[str]:
    """Each `Record(...)` outside the builders, as path:line."""
    found = []
    for path, tree in modules.items():
        allowed = [f for f in _functions(tree) if (path, f.name) in BUILDERS]
        inside = {id(node) for f in allowed for node in ast.walk(f)}
        found += [f"{path}:{node.lineno}" for node in ast.walk(tree)
                  if isinstance(node, ast.Call) and _called(node) == "Record" and id(node) not in inside]
    return found


def records_replaced(modules: dict[str, ast.Module]) -> list[str]:
    """Each `replace(record, ...)` / `dataclasses.replace(record, ...)` of a record in a producer, as path:line."""
    makers = _record_makers(modules)
    found = []
    for path, tree in modules.items():
        if path.split("/")[0] not in PRODUCERS:
            continue
        for function in _functions(tree):
            names = _record_names(function, makers)
            found += [f"{path}:{node.lineno}" for node in ast.walk(function)
                      if isinstance(node, ast.Call) and _called(node) == "replace" and node.args
                      and (isinstance(node.args[0], ast.Name) and node.args[0].id in names
                           or isinstance(node.args[0], ast.Call) and _called(node.args[0]) in makers)]
    return sorted(set(found))


@pytest.mark.slow
def test_a_record_is_constructed_in_record_of_alone():
    assert records_constructed(_modules()) == []


@pytest.mark.slow
def test_no_producer_makes_a_changed_copy_of_a_record():
    assert records_replaced(_modules()) == []


def test_the_checks_see_a_record_built_in_steps():
    """The checks themselves: a producer building a record and replacing into it is caught."""
    stepwise = ast.parse(
        "def compute(x) -> Record:\n"
        "    record = Record(variant='v', seed=0, config={})\n"
        "    return dataclasses.replace(record, status='failed')\n"
        "def diagnosed(record: Record, mine) -> Record:\n"
        "    return replace(record, stages=mine)\n"
        "def added(mine):\n"
        "    return replace(compute(mine), stages=mine)\n"
        "def each(records):\n"
        "    return [replace(record, path=None) for record in records]\n")
    assert records_constructed({"compute/pipeline.py": stepwise}) == ["compute/pipeline.py:2"]
    assert records_replaced({"compute/pipeline.py": stepwise}) == [
        "compute/pipeline.py:3", "compute/pipeline.py:5", "compute/pipeline.py:7", "compute/pipeline.py:9"]
    assert records_replaced({"record/keeping.py": stepwise}) == []  # a copy for the sinks, not a producer


def test_each_part_is_named_as_the_record_names_it():
    record_fields = {f.name for f in fields(Record)}
    for part in (Setup, Pair, Diagnosis):
        assert {f.name for f in fields(part)} <= record_fields, part


def diagnosis(**changed) -> Diagnosis:
    weights = np.full((3, 3), 1 / 3, dtype=np.float32)  # (query, key)
    values = dict.fromkeys(f.name for f in fields(Diagnosis))
    values.update(variant=Side(stages={"weights": weights}, shapes={"weights": [3, 3]},
                               canonical_shapes={"weights": [1, 1, 3, 3]}, diagnostics={"divergence_weights": 0.5}),
                  reference=Side(), expected_shapes={}, missing_stages=[], reconstructed_stages=[],
                  output_is_context=False, returned="Tensor (3, 2)", head_diagnostics={}, findings=[Finding("scaling", "scores", "error", "x")],
                  not_checked=[], predictions=[], **changed)
    return Diagnosis(**values)


SETUP = Setup(variant="unscaled", seed=3, config={"seed": 3}, labels=["a", "b", "c"], n_tokens=3, d_in=3, d_out=2)


def test_a_failed_record_keeps_what_the_steps_before_the_failure_found():
    pair = Pair(reference="multi_head_attention", weights_loaded={"W_query": "copied"})
    record = record_of(SETUP, pair, error="variant 'unscaled' raised ValueError: no")
    assert (record.status, record.error) == ("failed", "variant 'unscaled' raised ValueError: no")
    assert record.reference.name == "multi_head_attention" and record.weights_loaded == {"W_query": "copied"}
    assert (record.variant.name, record.seed, record.labels, record.d_out) == ("unscaled", 3, ["a", "b", "c"], 2)
    assert record.variant.stages == {} and record.variant.diagnostics == {} and record.findings == []


def test_a_diagnosed_record_holds_the_diagnosis_and_its_profile_as_diagnostics():
    record = record_of(SETUP, Pair(reference="reference"), diagnosis(), profile={"time_ratio": 2.0})
    assert record.ok and record.error is None
    assert record.variant.canonical("weights").shape == (1, 1, 3, 3) and record.findings[0].code == "scaling"
    assert record.variant.diagnostics == {"divergence_weights": 0.5, "time_ratio": 2.0}
    assert record.profile == {"time_ratio": 2.0}


EFFECT = Effect(kl_mean=0.5, kl_max=1.0, kl_clamped=0.0, top1_agreement=0.75, loss=2.0, loss_changed=2.5,
                hidden_divergence=0.1, hidden_relative_divergence=0.01, non_finite_positions=0)


@pytest.mark.parametrize("key", ["effect", "end_to_end"])
def test_a_model_runs_effect_is_in_its_model_and_its_diagnostics(key):
    """The variant's effect in a layer's place (`effect`); the learner's check's, both models whole (`end_to_end`)."""
    about = ModelInfo(model="gpt2", n_layers=2, parameters=10, tokenizer="gpt2", heads=2, kv_heads=2, layer=1,
                      attention="h.1.attn", end_to_end=EFFECT if key == "end_to_end" else None)
    setup = Setup(variant="unscaled", seed=0, config={}, model=about)
    record = record_of(setup, Pair(), diagnosis(), effect=EFFECT if key == "effect" else None)
    assert getattr(record.model, key) == EFFECT and record.model.layer == 1
    assert record.variant.diagnostics[f"{key}_kl_mean"] == 0.5 and record.variant.diagnostics["divergence_weights"] == 0.5
    failed = record_of(setup, Pair(), error="the model raised")
    assert failed.model.effect is None and failed.variant.diagnostics == {}
