"""Predictions: the learner writes down what a run should show, then the run checks it.

"Predict the shapes and values, then check stage by stage": an `expect:` block in the config
names each prediction. It is validated before any work, so a typo costs no run, and every
prediction becomes a Prediction(name, expected, observed, passed) with JSON-able values.
The "Predictions" section of docs/guide/configuration.md documents every key with its value format.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Collection, Mapping
from typing import Any

from attnlab.capture.recorder import Capture
from attnlab.capture.stages import STAGES
from attnlab.diagnosis.codes import BY_CODE, closest
from attnlab.errors import UserError
from attnlab.record import Finding, Prediction

ROW_SUM_TOL = 1e-4

ALLOWED: tuple[str, ...] = (
    "context_shape",  # weights @ values in the module's own rank: [n_tokens, d_out], [b, num_heads, n_tokens, head_dim]
    "output_shape",  # the module's return value: [n_tokens, d_out], [b, n_tokens, d_out]
    "weights_shape",  # [n_tokens, n_tokens], [b, num_heads, n_tokens, n_tokens]
    "num_heads",  # the heads of the weights: 1 for a single-head module, num_heads for a multi-head one
    "row_sums",  # 1: every row of the weights sums to 1
    "matches_reference",  # true: no stage diverges from the reference
    "first_divergent_stage",  # a stage name, or null
    "softmax_dim",  # the dim the softmax normalised over (negative counts from the end), or null
    "findings",  # the finding codes, compared as a set; a single code stands for a list of one
)

# Keys whose value is a list of items: on the command line `expect.findings=scaling` is what
# people type for a single code, so a single value stands for a list of one. A shape is not such
# a list: `expect.context_shape=6` is a half-typed [6, 2] and stays an error.
LIST_KEYS: frozenset[str] = frozenset({"findings"})


def _as_given(key: str, value: Any) -> Any:
    """The value as it is checked: a list-valued key's single value as a list of one."""
    if key in LIST_KEYS and not isinstance(value, (list, tuple)):
        return [value]
    return value


def _shape(value: Any) -> str | None:
    ok = isinstance(value, (list, tuple)) and all(isinstance(v, int) and not isinstance(v, bool) for v in value)
    return None if ok else "expected a list of ints like [6, 2]"


def _number(value: Any) -> str | None:
    ok = isinstance(value, (int, float)) and not isinstance(value, bool)
    return None if ok else "expected a number like 1"


def _count(value: Any) -> str | None:
    ok = isinstance(value, int) and not isinstance(value, bool) and value >= 1
    return None if ok else "expected a whole number of heads like 2"


def _bool(value: Any) -> str | None:
    return None if isinstance(value, bool) else "expected true or false"


def _stage(value: Any) -> str | None:
    return None if value is None or value in STAGES else f"expected null or one of {', '.join(STAGES)}"


def _dim(value: Any) -> str | None:
    ok = value is None or (isinstance(value, int) and not isinstance(value, bool))
    return None if ok else "expected an int or null"


def _codes(value: Any) -> str | None:
    ok = isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value)
    return None if ok else "expected a finding code or a list of them, like scaling or [scaling,softmax_axis]"


def _undeclared(codes: list[str], also: Collection[str]) -> str | None:
    """A one-line error for the first code no check declares (a typo), naming the closest one."""
    unknown = next((code for code in codes if code not in BY_CODE and code not in also), None)
    if unknown is None:
        return None
    near = closest(unknown, also)
    hint = f"did you mean {near}? " if near else ""
    return f"expect.findings: {unknown} is not a finding code; {hint}declared: {', '.join(sorted(BY_CODE))}"


_VALIDATORS: dict[str, Callable[[Any], str | None]] = {
    "context_shape": _shape, "output_shape": _shape, "weights_shape": _shape, "num_heads": _count,
    "row_sums": _number, "matches_reference": _bool,
    "first_divergent_stage": _stage, "softmax_dim": _dim, "findings": _codes,
}


def validate_expectations(expect: Mapping[str, Any], also: Collection[str] = ()) -> None:
    """Raise UserError naming the first bad key, before the run does any work; `also`: the finding
    codes declared above the diagnosis (a model run's, attnlab.model.finding_codes.NAMES)."""
    for key, value in expect.items():
        if key not in ALLOWED:
            raise UserError(f"expect.{key}: unknown prediction; allowed: {', '.join(ALLOWED)}")
        problem = _VALIDATORS[key](_as_given(key, value))
        if problem:
            raise UserError(f"expect.{key}: {problem}, got {value!r}; allowed: {', '.join(ALLOWED)}")
        undeclared = _undeclared(_as_given(key, value), also) if key == "findings" else None
        if undeclared:
            raise UserError(undeclared)


def _row_sums(expected: float, variant: Capture) -> tuple[float | None, bool]:
    """Observed: the row sum farthest from the expected one (None without weights)."""
    weights = variant.stages.get("weights")
    if weights is None:
        return None, False
    sums = weights.sum(dim=-1, dtype=weights.dtype).double()
    sums = sums.flatten()
    worst = float(sums[(sums - expected).abs().argmax()]) if sums.numel() else expected
    return worst, math.isfinite(worst) and abs(worst - expected) <= ROW_SUM_TOL * max(1.0, abs(expected))


def _softmax_dim_matches(expected: int | None, observed: int | None, weights_rank: int | None) -> bool:
    """The observed dim is stored non-negative; the source writes `dim=-1`, so a negative expected
    dim is counted from the end of the weights' rank, as torch counts it."""
    if expected is None or observed is None or weights_rank is None:
        return expected == observed
    if -weights_rank <= expected < 0:
        expected += weights_rank
    return expected == observed


def _native(variant: Capture, stage: str) -> list[int] | None:
    """A stage's shape as the module made it (the record and the terminal show the same)."""
    shape = variant.native_shapes.get(stage)
    return list(shape) if shape is not None else None


def check_predictions(expect: Mapping[str, Any], variant: Capture, diagnostics: dict[str, float],
                      first_divergent: str | None, findings: list[Finding]) -> list[Prediction]:
    """One Prediction per `expect` entry, in the order written."""
    stages = variant.stages
    observed: dict[str, Callable[[], Any]] = {
        "context_shape": lambda: _native(variant, "context"),
        "output_shape": lambda: _native(variant, "output"),
        "weights_shape": lambda: _native(variant, "weights"),
        "num_heads": lambda: int(stages["weights"].shape[1]) if "weights" in stages else None,
        "matches_reference": lambda: first_divergent is None,
        "first_divergent_stage": lambda: first_divergent,
        "softmax_dim": lambda: variant.softmax_dim,
        "findings": lambda: sorted({f.code for f in findings}),
    }
    predictions = []
    for name, given in expect.items():
        expected = _as_given(name, given)
        if name == "row_sums":
            seen, passed = _row_sums(float(expected), variant)
        elif name == "softmax_dim":
            seen = observed[name]()
            rank = len(variant.native_shapes["weights"]) if "weights" in stages else None
            passed = _softmax_dim_matches(expected, seen, rank)
        elif name == "findings":
            seen = observed[name]()
            expected, passed = sorted(set(expected)), set(expected) == set(seen)
        else:
            seen = observed[name]()
            expected = list(expected) if isinstance(expected, (list, tuple)) else expected
            passed = seen == expected
        predictions.append(Prediction(name, expected, seen, bool(passed)))
    return predictions
