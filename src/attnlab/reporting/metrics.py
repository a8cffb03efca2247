"""Metric names, hyperparameters and the texts trackers show: one place every tracker sink uses.

A record's diagnostics are flat names (`divergence_context`, `scale_observed`); trackers group
them by prefix into tags (`divergence/context`, `scaling/observed`), the variant in the plain
namespace and the reference's own values under `reference/...`. Hyperparameters are the config
flattened to dot-joined keys, with the sweep table's column names where both exist. A run is
named by its variant, the values it was given (`run_label`) and its seed; its findings are a
markdown list (`findings_markdown`).
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any, TypeGuard

import numpy as np

from attnlab.record import Finding, Record

if TYPE_CHECKING:
    from hydra.core.override_parser.types import Override

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
SIZES = ("n_tokens", "d_in", "d_out")  # the record's own sizes, not the config's (null: the inputs tell)
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
    tagged = {metric_name(name): value for name, value in record.variant.diagnostics.items()}
    for name, value in record.reference.diagnostics.items():
        tag = metric_name(name)
        if tag.split("/")[0] not in COMPARISON_GROUPS:
            tagged[f"reference/{tag}"] = value
    return {tag: float(value) for tag, value in tagged.items() if _is_number(value) and not math.isnan(value)}


def _is_number(value: object) -> TypeGuard[float | np.number[Any] | np.bool_]:
    return isinstance(value, (int, float, np.number, np.bool_))


def hparams(record: Record) -> dict[str, bool | int | float | str]:
    """A record's hyperparameters: its flattened config with the real sizes (not the config's nulls).
    A size the record never reached (its job failed before its inputs were made) is absent, never 0."""
    sizes = reached_sizes(record)
    flat = {key: value for key, value in flat_hparams(record.config).items()
            if not (key in SIZES and key not in sizes and value == "None")}
    return {**flat, **sizes}


def reached_sizes(record: Record) -> dict[str, int]:
    """{size: value} of the sizes the record's run reached: a record written for a job that failed
    before its inputs were made holds 0 for each, which is no size."""
    return {name: getattr(record, name) for name in SIZES if getattr(record, name) > 0}


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


def override_hparams(overrides: Iterable[str], *, swept_only: bool = False) -> list[str]:
    """The hyperparameters command-line overrides set (`d_out=8` -> `d_out`), each once, in their
    order; with `swept_only`, those given several values. Hydra's and the outputs' keys are not
    hyperparameters."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    names = [overridden_hparam(override, swept_only=swept_only)
             for override in OverridesParser.create().parse_overrides(list(overrides))]
    return list(dict.fromkeys(name for name in names if name is not None))


def overridden_hparam(override: Override, *, swept_only: bool = False) -> str | None:
    """The hyperparameter one parsed override sets (`override_hparams`); None for Hydra's and the
    outputs' keys, and with `swept_only` for an override of one value."""
    key = override.key_or_group
    if (override.is_sweep_override() or not swept_only) and not key.startswith(("hydra", "log.", "sink.")):
        return hparam_name(key)
    return None


LABEL_VALUE_LENGTH = 24  # a value longer than this (a path, a list) is cut in a run's name


def run_label(record: Record, keys: Iterable[str], *, seed: bool = True) -> str:
    """`unscaled d_out=8 s1`: the variant, the record's value of each of `keys` (the swept or given
    hyperparameters, besides the variant and the seed) and the seed (unless `seed` is false); long
    values cut with "…"."""
    values = hparams(record)
    given = [f"{key}={_short(values[key])}" for key in keys if key not in ("variant", "seed") and key in values]
    return " ".join([record.variant.name, *given, *([f"s{record.seed}"] if seed else [])])


def _short(value: object) -> str:
    text = f"{value:g}" if isinstance(value, float) else str(value)
    return text if len(text) <= LABEL_VALUE_LENGTH else text[:LABEL_VALUE_LENGTH - 1] + "…"


def findings_markdown(record: Record) -> str:
    """A markdown list of the findings ("no findings" when empty), the failure first if any."""
    lines = [] if record.ok else [f"**run failed**: {record.error or 'no error message'}", ""]
    lines += [_finding_line(finding) for finding in record.findings] or ["no findings"]
    return "\n".join(lines)


def _finding_line(finding: Finding) -> str:
    return f"- **{finding.severity}** `{finding.code}` at `{finding.stage}`: {finding.message}"


__all__ = [
    "GROUPS", "KEY_METRICS", "SIZES", "findings_markdown", "flat_hparams", "hparam_name", "hparam_value", "hparams", "metric_name",
    "metric_values", "overridden_hparam", "override_hparams", "reached_sizes", "run_label",
]
