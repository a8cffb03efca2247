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

import dataclasses
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from hydra.errors import HydraException
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException
from torch import nn

from attnlab.app.config_paths import config_dir, user_config_dir
from attnlab.app.config_store import register_configs, variant_nodes
from attnlab.app.overrides import user_overrides
from attnlab.errors import UserError
from attnlab.inputs.input_configs import SCHEMAS as INPUT_SCHEMAS
from attnlab.modules import session
from attnlab.modules.registry import discover, refresh
from attnlab.record import Finding, Record, write_atomic
from attnlab.reporting.rows import module_table, records_table
from attnlab.schema import KEYS
from attnlab.sinks.base import JobInfo

if TYPE_CHECKING:
    import pandas as pd


@dataclass
class Result:
    """One seed's record, with the views a notebook wants."""

    record: Record

    @property
    def stages(self) -> dict[str, np.ndarray | None]:
        """Each stage in the module's own rank (SelfAttention_v1's weights (6, 6)); the canonical
        (batch, heads, ...) view is `result.record.variant.canonical(stage)`."""
        return self.record.variant.stages

    @property
    def reference_stages(self) -> dict[str, np.ndarray | None]:
        return self.record.reference.stages

    @property
    def diagnostics(self) -> dict[str, float | None]:
        return self.record.variant.diagnostics

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
        layer = f", layer={self.record.model.layer}" if self.record.model is not None else ""
        return (f"Result(variant={self.record.variant.name!r}, seed={self.record.seed}{layer}, "
                f"status={self.record.status!r}, findings={codes})")

    def _repr_html_(self) -> str:
        """A notebook's inline view: findings, shape trace and heatmaps (attnlab.sinks.inline_html)."""
        from attnlab.sinks.inline_html import result_html  # Pillow and the pages: only when displayed

        return result_html(self.record)


class Results(list[Result]):
    """Several results of one run (its seeds, or a model's layers): a list, with the views a
    notebook wants, as one Result has."""

    @property
    def table(self) -> pd.DataFrame:
        """Every record's row of comparison.csv (a model's layers: one row per layer)."""
        return records_table([result.record for result in self])

    def __repr__(self) -> str:
        return "Results([\n" + "".join(f"  {result!r},\n" for result in self) + "])"

    def _repr_html_(self) -> str:
        """A model's layers: the per-layer table, then each layer's findings and maps; seeds: one section each."""
        from attnlab.sinks.inline_html import results_html

        return results_html([result.record for result in self])


def override_words(variant: str, seed: int, overrides: Iterable[str] = (), **kwargs: Any) -> list[str]:
    """Keyword overrides become Hydra overrides: d_out=4 -> "d_out=4", inputs="random" -> "inputs=random",
    log={"tensorboard": False} -> "log.tensorboard=false"."""
    return user_overrides([f"variant={variant}", f"seed={seed}", *_override_words(kwargs), *overrides])


def compose_config(variant: str, seed: int, overrides: Iterable[str] = (), **kwargs: Any) -> DictConfig:
    """The job's config, as the CLI composes it; a mistake is one line (`UserError`), as the CLI's."""
    from attnlab.app.cli import check_group_overrides, one_line

    _check_keywords(kwargs)
    words = override_words(variant, seed, overrides, **kwargs)
    registry = discover()
    variants = (variant_nodes(registry), tuple(registry.duplicates), tuple(registry.shadowed))
    key = (variants, _user_conf_fingerprint(), tuple(words))
    if key not in _COMPOSED:
        if _COMPOSED.get("registry") != variants:  # composed with other variants: never asked again
            _COMPOSED.clear()
            _COMPOSED["registry"] = variants
        register_configs(registry)  # the ConfigStore's variants follow the registry's (unchanged: a no-op)
        try:
            check_group_overrides(words)
            GlobalHydra.instance().clear()
            with initialize_config_dir(config_dir=str(config_dir()), version_base="1.3"):
                composed = compose(config_name="config", overrides=words)
        except UserError:
            raise
        except (HydraException, OmegaConfBaseException) as exc:  # Hydra's wall of text: the CLI's one line
            raise UserError(one_line(exc, words)) from None
        OmegaConf.set_readonly(composed, True)  # shared by every run of the same request: never changed
        _COMPOSED[key] = composed
    cfg: DictConfig = _COMPOSED[key]
    return cfg


# Composed configs by (the registry's variants, ./conf's files, overrides): Hydra's composition is most
# of a warm call's time, and a notebook repeats the same request; each is read-only, so no run changes
# another's. A registry rebuilt with the same variants (a new session) composes the same configs.
_COMPOSED: dict[Any, Any] = {}


def _user_conf_fingerprint() -> tuple[tuple[str, int, int], ...]:
    folder = user_config_dir()
    if folder is None:
        return ()
    return tuple((str(p), p.stat().st_mtime_ns, p.stat().st_size) for p in sorted(folder.rglob("*.yaml")))


def run(
    variant: str | type[nn.Module] | nn.Module = "reference",
    seed: int = 123,
    *,
    reference: str | type[nn.Module] | nn.Module | None = None,
    overrides: Iterable[str] = (),
    out_dir: str | Path | None = None,
    **kwargs: Any,
) -> Result | Results:
    """Run one variant against the reference; a list of results (`Results`) when n_seeds > 1 (or layer="all").

    `variant` and `reference` are a name, a class (built from the config under the seed, as a
    plugin's) or an instance (a deep copy of it runs; its weights are the reference's unless
    weights="native"). A list is a sweep: `attnlab.sweep`."""
    cfg, words = prepared(variant, seed, reference=reference, overrides=overrides, **kwargs)
    if out_dir is not None:
        _unused_folder(Path(out_dir))
    return run_prepared(cfg, words, None if out_dir is None else JobInfo(Path(out_dir)))


def _unused_folder(folder: Path) -> None:
    """A second run into one folder overwrote the first's record and left both runs' event files
    side by side (TensorBoard then drew one run from two): refused, nothing of the first lost."""
    found = next(iter(sorted(folder.glob("**/record.json"))), None) if folder.is_dir() else None
    if found is not None:
        raise UserError(f"out_dir={folder}: holds a run already ({found.relative_to(folder)}); "
                        f"give a new folder, or remove this one to run again")


def run_prepared(cfg: DictConfig, words: list[str], job: JobInfo | None,
                 sinks: dict[str, Any] | None = None) -> Result | Results:
    """`run` once its config is composed (`prepared`): the job written into `job`'s folder, its
    `.hydra/` as the CLI writes it, or nowhere; `sinks`: `check`'s, when it already ran."""
    from attnlab.app.run_job import run_job

    if job is not None:
        hydra_dir = Path(job.dir) / ".hydra"
        write_atomic(hydra_dir / "config.yaml", OmegaConf.to_yaml(cfg))
        write_atomic(hydra_dir / "overrides.yaml", OmegaConf.to_yaml(OmegaConf.create(words)))
    results = Results(Result(record) for record in run_job(cfg, job, sinks))
    return results[0] if len(results) == 1 else results


def prepared(
    variant: str | type[nn.Module] | nn.Module = "reference",
    seed: int = 123,
    *,
    reference: str | type[nn.Module] | nn.Module | None = None,
    overrides: Iterable[str] = (),
    **kwargs: Any,
) -> tuple[DictConfig, list[str]]:
    """`run`'s config for these arguments and its overrides as the CLI would read them: objects
    registered under their session names, a notebook's terminal output and progress bar off."""
    _one_value("variant", variant)
    _one_value("seed", seed)
    refresh()
    variant = session_name(variant)
    if reference is not None:
        kwargs["reference"] = session_name(reference)
    for key in ("model", "reference_model"):  # an in-memory model: run itself (swapped in place, put back), nothing saved
        if isinstance(kwargs.get(key), nn.Module):
            kwargs[key] = session.register_model(kwargs[key])
        elif isinstance(kwargs.get(key), type):
            raise UserError(f"{key}={kwargs[key].__name__}: a model class needs its config; pass an instance "
                            f"({key}={kwargs[key].__name__}(cfg)) or a ./models/NAME.py file")
    edit = kwargs.get("intervene")
    if isinstance(edit, dict):  # an edit's function and metric: held for this session, named in the config
        from attnlab.model.user_callables import register

        kwargs["intervene"] = {**edit, **{key: register(edit[key]) for key in ("function", "metric")
                                          if callable(edit.get(key))}}
    overrides = list(overrides)
    for switch in ("terminal", "progress"):  # a notebook shows the Result
        if not any(o.lstrip("+").startswith(f"log.{switch}=") for o in overrides):
            kwargs["log"] = {switch: False, **kwargs.get("log", {})}
    return compose_config(variant, seed, overrides, **kwargs), override_words(variant, seed, overrides, **kwargs)


def session_name(obj: str | type[nn.Module] | nn.Module) -> str:
    """A variant's name: a name as it is, a class or an instance registered for this session."""
    if isinstance(obj, str):
        return obj
    if isinstance(obj, nn.Module) or (isinstance(obj, type) and issubclass(obj, nn.Module)):
        return session.register(obj)
    raise UserError(f"variant={obj!r}: a variant is a name, an nn.Module class or an nn.Module instance")


def _one_value(key: str, value: Any) -> None:
    """A list (or "a,b") never runs only one of its values: a sweep is attnlab.sweep."""
    several = isinstance(value, (list, tuple)) or (key == "variant" and isinstance(value, str) and "," in value)
    if several:
        shown = list(value) if isinstance(value, (list, tuple)) else value.split(",")
        raise UserError(f"{key}={shown!r}: attnlab.run runs one {key}; several are a sweep: "
                        f"attnlab.sweep({key}={shown!r})")


def _check_keywords(kwargs: dict[str, Any]) -> None:
    """A key of the inputs given at the top level (`n_tokens=9`): one line naming where it goes."""
    top = {key.name.split(".")[0] for key in KEYS}
    for key, value in kwargs.items():
        if key in top or key in ("variant", "reference", "inputs", "log", "sink", "expect", "model",
                                 "reference_model", "reference_params"):
            continue
        kinds = [name for name, schema in INPUT_SCHEMAS.items()
                 if key in {f.name for f in dataclasses.fields(schema)}]
        if kinds:
            raise UserError(f"{key}={value!r}: {key} is a key of the inputs (inputs.{key}); "
                            f'write inputs={{"kind": "{kinds[0]}", "{key}": {value!r}}} (kinds that take it: {", ".join(kinds)})')


def _override_words(values: dict[str, Any], prefix: str = "") -> list[str]:
    words = []
    for key, value in values.items():
        if not prefix and key == "inputs" and isinstance(value, dict) and "kind" in value:  # the kind picks its schema
            words += [f"inputs={_group_choice('inputs', value['kind'])}",
                      *_override_words({k: v for k, v in value.items() if k != "kind"}, "inputs.")]
        elif isinstance(value, dict):
            words += _override_words(value, f"{prefix}{key}.")
        elif not prefix and key in ("inputs", "experiment", "sink"):  # the command line's config groups
            words.append(f"{key}={_group_choice(key, value)}")
        else:
            words.append(f"{prefix}{key}={_hydra_value(value)}")
    return words


def _group_choice(group: str, value: Any) -> str:
    """A config group's option by name (`inputs="random"`): a name, never grammar."""
    from attnlab.app.cli import _group_allowed

    if isinstance(value, str) and re.fullmatch(r"[\w./-]+", value, flags=re.ASCII):
        return value
    raise UserError(f"{group}={value!r}: {_group_allowed(group)}")


def _hydra_value(value: Any) -> str:
    """A Python value as Hydra's grammar reads it back unchanged: a string quoted and escaped, so
    a text is data (`,` `'` `=` `{}` `${oc.env:VAR}` as written, never a list, a sweep or a lookup)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(_hydra_value(v) for v in value) + "]"
    if isinstance(value, str):
        return quoted(value)
    return str(value)


def quoted(text: str) -> str:
    """`text` as a quoted Hydra value of the same text: quotes escaped as Hydra's own quoting does,
    and each `${` escaped for OmegaConf (a backslash already before one doubled, to stay a backslash)."""
    from hydra.core.override_parser.types import Quote, QuotedString

    escaped = re.sub(r"(\\*)\$\{", lambda m: m.group(1) * 2 + "\\${", text)
    return QuotedString(text=escaped, quote=Quote.single).with_quotes()
