"""The checks Hydra's types cannot make: values, unknown keys (with the closest known key named)
and the variant's params, so that a bad value fails before any work. Importable without torch
(the registry's, which imports the plugins, only where a message names a constructor's key)."""

from __future__ import annotations

import dataclasses
import difflib
from collections.abc import Iterable, Iterator
from typing import Any

from omegaconf import DictConfig, OmegaConf

from attnlab.app.config_paths import config_dir, group_options
from attnlab.app.config_values import check_given_values, check_values
from attnlab.errors import UserError
from attnlab.inputs.input_configs import SCHEMAS
from attnlab.schema import LOG_OPTIONS, Config


def validate(cfg: DictConfig) -> None:
    """Checks beyond the schema's types, so that a bad value fails before any work."""
    unknown_keys(cfg)
    check_inputs(cfg.inputs)
    check_values(cfg)
    if not isinstance(cfg.variant.params, (dict, DictConfig)):
        raise UserError("variant.params: must be a mapping of constructor arguments")


def check_given(args: list[str]) -> None:
    """A single run's command line, before the plugins (and torch) are imported: a top-level key the
    schema does not have where one of similar name is meant (`n_sedes=2`), then the schema's values
    (attnlab.app.config_values.check_given_values). Any other unknown key is left to Hydra's
    composition, whose message may name a nested key (`closest_key`)."""
    top = [field.name for field in dataclasses.fields(Config)]  # the composed config's top level, whatever the groups
    for arg in args:
        key, eq, value = arg.partition("=")
        if eq and key.isidentifier() and key not in (*top, "hydra") and not (config_dir() / key).is_dir():
            message = unknown_key_message(key, top, value)
            if "did you mean" in message:
                raise UserError(message)
    check_given_values(args)


def check_inputs(inputs: Any) -> None:
    """Build the inputs' structured config, which checks its values; a plain one passes as is."""
    if OmegaConf.is_dict(inputs) and OmegaConf.get_type(inputs) in SCHEMAS.values():
        OmegaConf.to_object(inputs)


def _dotted(cfg: Any, prefix: str = "") -> Iterator[tuple[str, Any]]:
    """(dotted key, node) for every node under `cfg`, the hydra node left out."""
    if not OmegaConf.is_dict(cfg):
        return
    for key, node in cfg.items_ex(resolve=False):
        if not prefix and key == "hydra":
            continue
        full = f"{prefix}{key}"
        yield full, node
        yield from _dotted(node, f"{full}.")


def unknown_keys(cfg: DictConfig) -> None:
    """A key that a `+`/`++` override added and no schema declares is an error, not ignored.

    A structured node declares its fields; `expect.*` and `variant.params.*` are open (checked by
    attnlab.diagnosis.predictions and against the variant's constructor), and so is a sink's config (its
    constructor checks its options)."""
    for key, node in [("", cfg), *_dotted(cfg)]:
        schema = OmegaConf.get_type(node) if OmegaConf.is_dict(node) else None
        if schema is None or not dataclasses.is_dataclass(schema):
            continue
        fields = {f.name for f in dataclasses.fields(schema)} | ({"hydra"} if not key else set())
        for extra in [k for k in node if k not in fields]:
            raise UserError(_unknown(f"{key}.{extra}" if key else str(extra), cfg))
    for extra in [k for k in cfg.log if k not in cfg.get("sink", {}) and k not in LOG_OPTIONS]:
        raise UserError(_unknown(f"log.{extra}", cfg))


def _unknown(key: str, cfg: DictConfig) -> str:
    return unknown_key_message(key, [k for k, _ in _dotted(cfg) if k != key])


def unknown_key_message(key: str, known: Iterable[str], value: str = "VALUE") -> str:
    """`KEY: unknown key; did you mean 'CLOSEST'?`: a sibling of similar name first, else any
    key of similar spelling (never one of its own parents). A top-level key set under
    variant.params is named as such, with or without `+`."""
    known = [k for k in known if not key.startswith(f"{k}.")]
    parent, _, leaf = key.rpartition(".")
    if parent == "variant.params":
        from attnlab.modules.registry import CONSTRUCTOR_KEYS, SPELLINGS

        top = next((k for k in CONSTRUCTOR_KEYS if leaf in SPELLINGS.get(k, (k,))), None)
        if top is not None:
            what = "a top-level key" if top == leaf else f"the top-level key {top}"
            return f"{key}: {leaf} is {what}; use {top}={value}"
    siblings = {k.rpartition(".")[2]: k for k in known if k.rpartition(".")[0] == parent}
    close = [siblings[c] for c in difflib.get_close_matches(leaf, list(siblings), n=1, cutoff=0.6)]
    # the header prints `d_in=3` for `inputs.d_in`: the same name under another parent is the likeliest meant
    close = close or [k for k in known if k.rpartition(".")[2] == leaf][:1]
    close = close or difflib.get_close_matches(key, known, n=1, cutoff=0.8)
    if close:
        return f"{key}: unknown key; did you mean '{close[0]}'?"
    if key.startswith("variant.params."):
        return f"{key}: not a default param of the variant; add it with +{key}=VALUE"
    return f"{key}: unknown key"


def closest_key(key: str, args: Iterable[str] = ()) -> str:
    """One line for an override of a key the config does not have, naming the closest known key
    of the config these `args` compose (their config-group choices; on the error path only)."""
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    groups = [a for a in args if "=" in a and a.split("=", 1)[0].lstrip("+") in ("variant", "inputs", "experiment")]

    def known_keys(overrides: list[str]) -> list[str]:
        try:
            GlobalHydra.instance().clear()
            with initialize_config_dir(config_dir=str(config_dir()), version_base="1.3"):
                return [k for k, _ in _dotted(compose(config_name="config", overrides=overrides))]
        except Exception:  # noqa: BLE001 - the suggestion is a courtesy; the error stands without it
            return []

    given = next((a.split("=", 1)[1] for a in args if a.split("=", 1)[0].lstrip("+") == key), "VALUE")
    message = unknown_key_message(key, known_keys([g for g in groups if "," not in g]), given)
    if "did you mean" in message or "." in key:
        return message
    # `d_in=4` typed back from the header of a run whose inputs have no such key: name the inputs that do
    kinds = [kind for kind in sum(group_options("inputs"), []) if f"inputs.{key}" in known_keys([f"inputs={kind}"])]
    return f"{message}; did you mean 'inputs.{key}={given}' (with inputs={'|'.join(kinds)})?" if kinds else message
