"""Hydra's config loader, composing each combination of config-group choices once per sweep.

Hydra composes every job of a sweep from scratch (~90 ms each), though the jobs of a sweep share
their config-group choices (`variant=linear` in five jobs) and differ in values (`seed=1..5`).
`SweepConfigLoader.load_sweep_config` composes a job's config-group lines once, through the
wrapped loader, then applies its value lines to a copy in order, with the calls Hydra's
composition makes, and sets what Hydra derives from the override lines (`hydra.overrides.task`,
`hydra.job.override_dirname`, the copied resolver cache). Only plain `key=value`, `+key=` and
`++key=` lines take this path; any other line (a deletion, a package, a Hydra override), or
anything raising on the way, composes the whole job through the wrapped loader, so a bad line
fails with Hydra's own error. Public Hydra API only.

The leading underscore keeps Hydra's plugin scan from executing this module a second time: that
would make a new `SweepConfigLoader` class, and the sweeper's instances (made from the old one)
would no longer pickle for joblib, submitit or Ray workers.
"""

from __future__ import annotations

import copy
import os
import re
from collections.abc import Sequence
from typing import Any

from hydra.core.config_loader import ConfigLoader
from hydra.core.config_search_path import ConfigSearchPath
from hydra.core.object_type import ObjectType
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.override_parser.types import Override
from hydra.plugins.config_source import ConfigSource
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf, open_dict

# Names a config source lists under no group though it may hold a folder of that name.
UNLISTED = ("__pycache__", "__init__.py")


def apply_override(config: DictConfig, override: Override) -> None:
    """Apply a value line to `config` in place, with the calls Hydra's composition makes for it
    (`_apply_overrides_to_config`); raises where Hydra would raise, and on a deletion (which
    the caller leaves to Hydra)."""
    if override.is_delete():
        raise ValueError("deletions are left to Hydra's composition")
    key, value = override.key_or_group, override.value()
    if override.is_add():
        if OmegaConf.select(config, key, throw_on_missing=False) is not None and not isinstance(value, (dict, list)):
            raise ValueError(f"{key} exists; `+` cannot add it")
        OmegaConf.update(config, key, value, merge=True, force_add=True)
    elif override.is_force_add():
        OmegaConf.update(config, key, value, merge=True, force_add=True)
    else:
        OmegaConf.update(config, key, value, merge=True)


def overrides_dirname(overrides: Sequence[Override], exclude_keys: Sequence[str], item_sep: str, kv_sep: str) -> str:
    """`hydra.job.override_dirname` as Hydra builds it (its function is not public API)."""
    lines = sorted(str(o.input_line) for o in overrides if o.key_or_group not in exclude_keys)
    return re.sub(pattern="[=]", repl=kv_sep, string=item_sep.join(lines))


class SweepConfigLoader(ConfigLoader):
    """A ConfigLoader delegating to `loader`, with a cache of composed config-group choices."""

    def __init__(self, loader: ConfigLoader) -> None:
        self.loader = loader
        self._composed: dict[tuple[Any, ...], DictConfig] = {}
        self._groups: dict[tuple[Any, ...], frozenset[str]] = {}
        self._parser: OverridesParser | None = None

    def __getstate__(self) -> dict[str, Any]:
        # joblib, submitit and Ray pickle the launcher's HydraContext: a worker fills its own cache
        return {"loader": self.loader}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["loader"])  # type: ignore[misc]

    def load_sweep_config(self, master_config: DictConfig, sweep_overrides: list[str]) -> DictConfig:
        try:
            config = self._from_cache(master_config, list(sweep_overrides))
        except Exception:  # noqa: BLE001 - Hydra's composition below raises the error to report
            config = None
        if config is None:
            config = self.loader.load_sweep_config(master_config=master_config, sweep_overrides=sweep_overrides)
        return config

    def is_group(self, master_config: DictConfig, override: Override) -> bool | None:
        """Whether Hydra's composition takes `override` as a config-group choice (its key names
        a group and its value is no dict); None when this loader cannot tell."""
        parent, _, name = override.key_or_group.rpartition("/")
        if name in UNLISTED:
            return None
        return name in self._child_groups(master_config, parent) and not isinstance(override.value(), dict)

    def _from_cache(self, master: DictConfig, lines: list[str]) -> DictConfig | None:
        """The job's config built from its composed config-group lines; None when a line is one
        this path does not take."""
        parser = self._parser = self._parser or OverridesParser.create()
        overrides = [parser.parse_override(line) for line in lines]
        groups: list[str] = []
        values: list[Override] = []
        for override in overrides:
            group = None if self._left_to_hydra(override) else self.is_group(master, override)
            if group is None or (not group and (override.package is not None or override.is_delete())):
                return None
            if group:
                groups.append(str(override.input_line))
            else:
                values.append(override)
        key = (*self._context(master), tuple(groups))
        if key not in self._composed:
            self._composed[key] = self.loader.load_sweep_config(master_config=master, sweep_overrides=groups)
        config = copy.deepcopy(self._composed[key])
        for override in values:
            apply_override(config, override)
        self._derive(config, master, overrides, len(groups))
        return config

    @staticmethod
    def _left_to_hydra(override: Override) -> bool:
        return (override.is_sweep_override() or override.is_hydra_override()
                or override.key_or_group == "hydra")

    @staticmethod
    def _derive(config: DictConfig, master: DictConfig, overrides: list[Override], composed: int) -> None:
        """What Hydra's composition sets from every override line, after applying them."""
        job = config.hydra.job
        task = config.hydra.overrides.task
        for _ in range(composed):  # the composed group lines, last in the list: now every line, in order
            task.pop()
        for override in overrides:
            task.append(override.input_line)
        with open_dict(config.hydra):
            for key in job.env_copy:
                job.env_set[key] = os.environ[key]
        dirname = job.config.override_dirname
        job.override_dirname = overrides_dirname(overrides, dirname.exclude_keys, dirname.item_sep, dirname.kv_sep)
        OmegaConf.copy_cache(from_config=master, to_config=config)

    @staticmethod
    def _context(master: DictConfig) -> tuple[Any, ...]:
        """What a composition depends on besides the job's lines: the primary config, Hydra's own
        overrides and the working folder (the primary config's search path may name ./conf)."""
        hydra_lines = OmegaConf.to_container(master.hydra.overrides.hydra)  # unresolved, as Hydra reads them
        return master.hydra.job.config_name, tuple(hydra_lines), os.getcwd()  # type: ignore[arg-type]

    def _child_groups(self, master: DictConfig, parent: str) -> frozenset[str]:
        key = (*self._context(master), parent)
        if key not in self._groups:
            name, hydra_lines, _ = self._context(master)
            self._groups[key] = frozenset(self.loader.get_group_options(
                parent, results_filter=ObjectType.GROUP, config_name=name, overrides=list(hydra_lines)))
        return self._groups[key]

    # The rest of the interface: the wrapped loader's.
    def load_configuration(self, config_name: str | None, overrides: list[str], run_mode: RunMode,
                           from_shell: bool = True, validate_sweep_overrides: bool = True) -> DictConfig:
        return self.loader.load_configuration(config_name=config_name, overrides=overrides, run_mode=run_mode,
                                              from_shell=from_shell, validate_sweep_overrides=validate_sweep_overrides)

    def get_search_path(self) -> ConfigSearchPath:
        return self.loader.get_search_path()

    def get_sources(self) -> list[ConfigSource]:
        return self.loader.get_sources()

    def list_groups(self, parent_name: str) -> list[str]:
        return self.loader.list_groups(parent_name)

    def get_group_options(self, group_name: str, results_filter: ObjectType | None = ObjectType.CONFIG,
                          config_name: str | None = None, overrides: list[str] | None = None) -> list[str]:
        return self.loader.get_group_options(group_name=group_name, results_filter=results_filter,
                                             config_name=config_name, overrides=overrides)

    def compute_defaults_list(self, config_name: str | None, overrides: list[str], run_mode: RunMode) -> Any:
        return self.loader.compute_defaults_list(config_name=config_name, overrides=overrides, run_mode=run_mode)
