"""`attnlab.run(...)` for notebooks: the same config composition, validation and numbers as the CLI.

The config is composed through Hydra's compose API from the same files and schema as the
command line, so `attnlab.run("unscaled", seed=123)` and `python -m attnlab variant=unscaled`
give the same record. Nothing is printed (the Result is the report) and nothing is written unless
`out_dir` is given: then the files of a job, record.json and every enabled sink's, and
`.hydra/config.yaml` and `.hydra/overrides.yaml` as Hydra writes them for a job (no `hydra.yaml`:
no Hydra run happened). The terminal summary is off unless asked for: `log={"terminal": True}`
prints it, with or without `out_dir`.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable

import numpy as np
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from omegaconf import DictConfig, OmegaConf

from attnlab.app.config import config_dir, register_configs, user_overrides
from attnlab.record import Finding, Record
from attnlab.reporting.rows import module_table

if TYPE_CHECKING:
    import pandas as pd


@dataclass
class Result:
    """One seed's record, with the views a notebook wants."""

    record: Record

    @property
    def stages(self) -> dict[str, np.ndarray]:
        """Each stage in the module's own rank (SelfAttention_v1's weights (6, 6)); the canonical
        (batch, heads, ...) view is `result.record.canonical(stage)`."""
        return self.record.stages

    @property
    def reference_stages(self) -> dict[str, np.ndarray]:
        return self.record.reference_stages

    @property
    def diagnostics(self) -> dict[str, float]:
        return self.record.diagnostics

    @property
    def findings(self) -> list[Finding]:
        return self.record.findings

    @property
    def first_divergent_stage(self) -> str | None:
        return self.record.first_divergent_stage

    @property
    def table(self) -> pd.DataFrame:
        return module_table(self.record)

    def __repr__(self) -> str:
        codes = [f"{f.code}@{f.stage}" for f in self.findings]
        return f"Result(variant={self.record.variant!r}, seed={self.record.seed}, status={self.record.status!r}, findings={codes})"

    def _repr_html_(self) -> str:
        """A notebook's inline view: findings, shape trace and heatmaps (attnlab.sinks.inline_html)."""
        from attnlab.sinks.inline_html import result_html  # Pillow and the pages: only when displayed

        return result_html(self.record)


def override_words(variant: str, seed: int, overrides: Iterable[str] = (), **kwargs: Any) -> list[str]:
    """Keyword overrides become Hydra overrides: d_out=4 -> "d_out=4", inputs="random" -> "inputs=random",
    log={"tensorboard": False} -> "log.tensorboard=false"."""
    return user_overrides([f"variant={variant}", f"seed={seed}", *_override_words(kwargs), *overrides])


def compose_config(variant: str, seed: int, overrides: Iterable[str] = (), **kwargs: Any) -> DictConfig:
    register_configs()
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(config_dir()), version_base="1.3"):
        return compose(config_name="config", overrides=override_words(variant, seed, overrides, **kwargs))


def run(
    variant: str = "reference",
    seed: int = 123,
    *,
    overrides: Iterable[str] = (),
    out_dir: str | Path | None = None,
    **kwargs: Any,
) -> Result | list[Result]:
    """Run one variant against the reference; a list of results when n_seeds > 1."""
    from attnlab.app.job import check, compute_records, write_outputs

    overrides = list(overrides)
    if not any(o.lstrip("+").startswith("log.terminal=") for o in overrides):
        kwargs["log"] = {"terminal": False, **kwargs.get("log", {})}  # a notebook shows the Result
    cfg = compose_config(variant, seed, overrides, **kwargs)
    sinks = check(cfg)
    records = compute_records(cfg, checked=True)
    if out_dir is not None:
        hydra_dir = Path(out_dir) / ".hydra"
        hydra_dir.mkdir(parents=True, exist_ok=True)
        OmegaConf.save(cfg, hydra_dir / "config.yaml")
        OmegaConf.save(OmegaConf.create(override_words(variant, seed, overrides, **kwargs)), hydra_dir / "overrides.yaml")
        write_outputs(cfg, records, Path(out_dir), sinks=sinks)
    elif cfg.log.get("terminal"):  # nothing written: each seed's summary, without the line naming its file
        from attnlab.sinks.terminal import print_record

        for record in records:
            print_record(record)
    results = [Result(record) for record in records]
    return results[0] if len(results) == 1 else results


def _override_words(values: dict[str, Any], prefix: str = "") -> list[str]:
    words = []
    for key, value in values.items():
        if isinstance(value, dict):
            words += _override_words(value, f"{prefix}{key}.")
        else:
            words.append(f"{prefix}{key}={_hydra_value(value)}")
    return words


def _hydra_value(value: Any) -> str:
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(_hydra_value(v) for v in value) + "]"
    return str(value)
