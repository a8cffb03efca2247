"""What a sweep's folder says of how it was started: the multirun.yaml Hydra saves there before
any job starts holds the command line's overrides and the sweeper's params (an experiment's
`hydra.sweeper.params`)."""

from __future__ import annotations

import shlex
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING

from attnlab.reporting.metrics import overridden_hparam

if TYPE_CHECKING:
    from hydra.core.override_parser.types import Override

MULTIRUN_FILE = "multirun.yaml"
MULTIRUN_MODE = "hydra.mode=MULTIRUN"  # Hydra's record of the `-m` flag


def swept_hparams(sweep_dir: Path) -> list[str]:
    """The hyperparameters a sweep varies (`variant`, `seed`, `variant.params.window`), in the order
    of its command line (`hydra.sweeper.params` first, as the sweeper reads them). The same list in
    every job: TensorBoard shows the columns of whichever job's experiment summary it reads first."""
    return list(swept_values(sweep_dir))


def swept_values(sweep_dir: Path) -> dict[str, list[str] | None]:
    """{hyperparameter: the values the sweep gives it, as typed} for each swept one, in the order
    of `swept_hparams`; None where listing them needs more than the command line (a glob over a
    config group's options)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    params, task, _ = _overrides(sweep_dir)
    values: dict[str, list[str] | None] = {}
    for override in OverridesParser.create().parse_overrides([*params, *task]):
        name = overridden_hparam(override, swept_only=True)
        if name is not None:
            values[name] = _listed(override)
    return values


def _listed(override: Override) -> list[str] | None:
    from hydra.errors import HydraException

    try:
        return list(override.sweep_string_iterator())
    except HydraException:  # a glob lists its config group's options, which the command line does not hold
        return None


def sweep_command(sweep_dir: Path) -> str | None:
    """The command that started the sweep, as it can be typed again (its own overrides, then
    Hydra's but the `-m` itself); None without multirun.yaml."""
    if not (Path(sweep_dir) / MULTIRUN_FILE).exists():
        return None
    _, task, hydra = _overrides(sweep_dir)
    return "python -m attnlab -m " + shlex.join([*task, *(line for line in hydra if line != MULTIRUN_MODE)])


Overrides = tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...]]


def _overrides(sweep_dir: Path) -> Overrides:
    """(the sweeper's params as `key=values`, the command line's overrides of the config, its
    overrides of Hydra's); empty without the file."""
    saved = Path(sweep_dir) / MULTIRUN_FILE
    if not saved.exists():
        return (), (), ()
    return _read(str(saved), saved.stat().st_mtime_ns)


@lru_cache(maxsize=8)
def _read(saved: str, mtime_ns: int) -> Overrides:
    """Read once per sweep and process (a sweep's job has a process of its own: once per job): the
    file (Hydra's help text included) is ~20 KB of YAML, which OmegaConf's pure-Python parser made
    most of a small job's TensorBoard output."""
    import yaml

    with open(saved, encoding="utf-8") as file:  # libyaml's parser where installed: keys and strings are all we read
        hydra_cfg = yaml.load(file, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))["hydra"]
    params = (hydra_cfg.get("sweeper") or {}).get("params") or {}
    overrides = hydra_cfg.get("overrides") or {}  # a file written by hand or by another tool may hold less
    return (tuple(f"{key}={value}" for key, value in params.items()), tuple(overrides.get("task") or ()),
            tuple(overrides.get("hydra") or ()))


__all__ = ["MULTIRUN_FILE", "sweep_command", "swept_hparams", "swept_values"]
