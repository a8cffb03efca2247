"""The composed config's values: turned into plain data (the one place below Hydra that resolves a
node) and checked against the schema's `KEYS` (attnlab.schema), one line for the first bad value.
Importable without torch: the command line's own values are checked before anything imports it
(`check_given_values`)."""

from __future__ import annotations

from typing import Any, cast

from omegaconf import DictConfig, OmegaConf

from attnlab.errors import UserError
from attnlab.schema import BOOK_TOKENS, KEYS, SEED_MAX, Key, is_int, show_value


def container(node: DictConfig, *, enum_to_str: bool = False, resolve: bool = True) -> dict[str, Any]:
    """The node as plain containers, resolved unless `resolve=False`; typed as the dict a DictConfig
    becomes (OmegaConf's return type also covers lists, strings and None, for other nodes)."""
    return cast(dict[str, Any], OmegaConf.to_container(node, resolve=resolve, enum_to_str=enum_to_str))


def wants_training(cfg: DictConfig) -> bool:
    """A training run (a `training` block): it writes training.json, not attention records."""
    return OmegaConf.select(cfg, "training") is not None


def plain(value: Any) -> Any:
    """A list or a mapping of the config as plain containers; a scalar as it is."""
    return OmegaConf.to_container(value, resolve=True) if OmegaConf.is_config(value) else value


def resolved(cfg: DictConfig) -> dict[str, Any]:
    """The config as plain JSON-able containers (enums as their names), as stored in records."""
    return container(cfg, enum_to_str=True)


def _relations(cfg: DictConfig) -> list[tuple[str, str, bool]]:
    """(the key, what is allowed, whether it holds) for constraints between keys; each is checked
    after every key's own check passed."""
    heads, kv, seed, n_seeds = cfg.num_heads, cfg.num_kv_heads, cfg.seed, cfg.n_seeds
    n_tokens = declared_n_tokens(cfg.inputs)
    return [
        ("num_kv_heads", f"must divide num_heads={heads}", kv is None or heads % kv == 0),
        ("n_seeds", f"seed+n_seeds-1 must stay within torch's seed range (seed={seed})", seed + n_seeds - 1 <= SEED_MAX),
        ("context_length", f"must be at least the inputs' {n_tokens} tokens",
         cfg.context_length is None or n_tokens is None or cfg.context_length >= n_tokens),
    ]


def declared_n_tokens(inputs: Any) -> int | None:
    """The inputs' token count where the config states it (random inputs, rows written into the
    config, the book's six); None where only reading them tells (a file, a text)."""
    kind = OmegaConf.select(inputs, "kind") if OmegaConf.is_dict(inputs) else None
    if kind == "random" and is_int(inputs.get("n_tokens")):
        n_tokens: int = inputs.n_tokens
        return n_tokens
    if kind == "book":
        rows = inputs.get("embeddings")
        return len(rows) if OmegaConf.is_list(rows) else BOOK_TOKENS
    return None


def check_values(cfg: DictConfig) -> None:
    """Every key of `KEYS` and every relation between them; the first bad one raises `UserError`."""
    for key in KEYS:
        check_key(cfg, key)
    for name, allowed, holds in _relations(cfg):
        if not holds:
            raise UserError(f"{name}={show_value(cfg[name])}: {allowed}")


def check_key(cfg: DictConfig, key: Key | str) -> None:
    """One key of `KEYS` (an instance or its name) against what it allows."""
    key = key if isinstance(key, Key) else next(k for k in KEYS if k.name == key)
    check_value(key, plain(OmegaConf.select(cfg, key.name, default=None)))


def check_value(key: Key, value: Any) -> None:
    if not key.accepts(value):
        raise UserError(f"{key.name}={show_value(value)}: {key.allowed}")


def check_given_values(args: list[str]) -> None:
    """A single run's command-line values of `KEYS` (`n_seeds=0`), parsed as Hydra parses them,
    checked before the plugins (and torch) are imported: a refusal that needs neither is printed
    in a fraction of a second. A sweep's lists, interpolations and what Hydra cannot parse are
    left to the checks of the composed config, which check everything again."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import HydraException

    keys = {key.name: key for key in KEYS}
    given = [arg for arg in args if "=" in arg and arg.split("=", 1)[0] in keys]
    try:
        overrides = OverridesParser.create().parse_overrides(overrides=given)
    except HydraException:
        return
    for override in overrides:
        if override.is_sweep_override():
            continue
        value = override.value()
        if not (isinstance(value, str) and "${" in value):
            check_value(keys[override.key_or_group], plain(value))


def check_n_tokens(cfg: DictConfig, n_tokens: int) -> None:
    """context_length against inputs whose length only reading them tells (a file, a text)."""
    if cfg.context_length is not None and cfg.context_length < n_tokens:
        raise UserError(f"context_length={cfg.context_length}: must be at least the inputs' {n_tokens} tokens")
