"""Metric names and hyperparameters for trackers: one place every tracker sink uses.

A record's diagnostics are flat names (`divergence_context`, `scale_observed`); trackers group
them by prefix into tags (`divergence/context`, `scaling/observed`), the variant in the plain
namespace and the reference's own values under `reference/...`. Hyperparameters are the config
flattened to dot-joined keys, with the sweep table's column names where both exist.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from attnlab.record import Record

# diagnostics prefix -> scalar group; a longer prefix before any prefix it contains
GROUPS = (
    ("relative_divergence_", "relative_divergence"),
    ("divergence_", "divergence"),
    ("non_finite_", "non_finite"),
    ("shape_ok_", "shape_ok"),
    ("weights_", "weights"),
    ("scale_", "scaling"),
    ("softmax_", "softmax"),
    ("batched_single_", "batched_single"),
    ("effect_", "effect"),  # a variant in a model: its effect on the model's output (attnlab.model.effect)
    ("end_to_end_", "end_to_end"),  # the learner's check: the two models whole
)
COMPARISON_GROUPS = {"divergence", "relative_divergence"}  # the reference against itself: 0 by definition

KEY_METRICS = (  # what a tracker shows beside the hyperparameters (TensorBoard's HParams metrics)
    "divergence/context",
    "relative_divergence/context",
    "weights/entropy_mean",
    "weights/row_sum_max_err",
    "scaling/observed",
    "batched_single/max_abs_diff",
)
# the sweep table's column names (attnlab.reporting.rows.KEY_COLUMNS), so both views agree
_HPARAM_ALIASES = {"variant.name": "variant", "inputs.n_tokens": "n_tokens", "inputs.d_in": "d_in"}
_HPARAM_SKIP = {"log", "sink", "plots"}  # output switches and settings, not settings of the experiment
_HPARAM_DATA = {"inputs.embeddings", "inputs.labels"}  # the token data itself, not a setting to compare


def metric_name(diagnostic: str) -> str:
    """The grouped tag of a diagnostics key."""
    for prefix, group in GROUPS:
        if diagnostic.startswith(prefix) and len(diagnostic) > len(prefix):
            return f"{group}/{diagnostic[len(prefix):]}"
    return f"diagnostics/{diagnostic}"


def metric_values(record: Record) -> dict[str, float]:
    """{tag: value} of the variant's and the reference's numeric diagnostics; NaN is skipped."""
    tagged = {metric_name(name): value for name, value in record.diagnostics.items()}
    for name, value in record.reference_diagnostics.items():
        tag = metric_name(name)
        if tag.split("/")[0] not in COMPARISON_GROUPS:
            tagged[f"reference/{tag}"] = value
    return {tag: float(value) for tag, value in tagged.items() if _is_number(value) and not math.isnan(value)}


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float, np.number, np.bool_))


def hparams(record: Record) -> dict[str, bool | int | float | str]:
    """A record's hyperparameters: its flattened config with the real sizes (not the config's nulls)."""
    return {**flat_hparams(record.config), "n_tokens": record.n_tokens, "d_in": record.d_in, "d_out": record.d_out}


def flat_hparams(config: Mapping[str, Any]) -> dict[str, bool | int | float | str]:
    """The config as hyperparameters: dot-joined keys, `variant.name` as `variant`,
    `inputs.n_tokens` as `n_tokens`, `inputs.d_in` as `d_in`; empty mappings vanish; the output
    switches and settings (`log.*`, `sink.*`) and the token data are left out."""
    flat: dict[str, bool | int | float | str] = {}

    def walk(prefix: str, value: Any) -> None:
        if isinstance(value, Mapping):
            for key, item in value.items():
                walk(f"{prefix}.{key}" if prefix else str(key), item)
        elif prefix not in _HPARAM_DATA and not _hydra_internal(prefix):
            flat[_HPARAM_ALIASES.get(prefix, prefix)] = hparam_value(value)

    walk("", {key: value for key, value in config.items() if key not in _HPARAM_SKIP})
    return flat


def _hydra_internal(key: str) -> bool:
    """`inputs._target_`, `inputs._convert_`: how Hydra builds a value, not a setting of the experiment."""
    last = key.rsplit(".", 1)[-1]
    return last.startswith("_") and last.endswith("_")


def hparam_name(key: str) -> str:
    """The hyperparameter a dotted config key (or a config group: `inputs`) is shown as."""
    return "inputs.kind" if key == "inputs" else _HPARAM_ALIASES.get(key, key)


def hparam_value(value: Any) -> bool | int | float | str:
    """Hyperparameter values are bool, number or string: numpy scalars become Python numbers,
    lists become JSON, None becomes "None"."""
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, (bool, int, float, str)):
        return value
    if value is None:
        return "None"
    if isinstance(value, (list, tuple)):
        return json.dumps(list(value), default=json_default)
    return str(value)


def json_default(value: Any) -> Any:
    return value.item() if isinstance(value, np.generic) else str(value)


__all__ = ["GROUPS", "KEY_METRICS", "flat_hparams", "hparam_name", "hparam_value", "hparams", "metric_name", "metric_values"]
