"""The config schema, its registration with Hydra, and the checks Hydra's types cannot make.

Every discovered variant becomes an option of the Hydra group `variant` through the
ConfigStore, so a plugin never needs a YAML file; `--help` lists them with their descriptions.
Every sink config found in the group `sink` (attnlab's conf/sink/ and ./conf/sink/ in the
working folder) joins the config under `sink.NAME`, switched by `log.NAME`: the one list of
switches is built here from the sinks found, so a sink of your own needs no edit to attnlab.
"""

from __future__ import annotations

import dataclasses
import difflib
import hashlib
import itertools
import os
import re
from importlib import resources
from pathlib import Path
from typing import Any, Iterable, Iterator

from hydra.core.config_store import ConfigStore
from hydra.core.plugins import Plugins
from hydra_plugins.attnlab_sweeper.attnlab_sweeper import AttnlabSweeper
from omegaconf import DictConfig, OmegaConf

from attnlab.errors import UserError
from attnlab.schema import KEYS, Config, VariantConf, check_values, show_value
from attnlab.inputs.kinds import SCHEMAS as INPUT_SCHEMAS
from attnlab.inputs.kinds import check_inputs
from attnlab.modules.registry import CONSTRUCTOR_KEYS, SPELLINGS, Registry, discover
from attnlab.plugin_folders import USER_GROUP, builtin_groups, group_heading


LOG_OPTIONS = {"images": True, "histograms": True, "progress": True}  # switches that are not sinks
JOB_DIRNAME_MAX = 120  # characters of a sweep job's folder name (file systems allow 255 bytes)
OPT_IN_SINKS = {"mlflow"}  # attnlab's sinks that stay off until log.NAME=true: they need an extra installed
USER_CONFIG = "conf"  # ./conf in the working folder joins Hydra's config search path


def config_dir() -> Path:
    return Path(str(resources.files("attnlab.conf")))


def help_header(registry: Registry) -> str:
    """The variants by group (the built-ins' folders, then yours), each with its description,
    constructor and declared tags; then the names defined twice and the plugins that failed."""
    width = max((len(n) for n in registry.names()), default=0)
    lines = []
    for group in [*builtin_groups(), USER_GROUP]:
        specs = [spec for spec in registry.specs.values() if spec.group == group]
        if specs:
            lines += ["", f"{group} (tag={group}): {group_heading(group)}"]
        for spec in sorted(specs, key=lambda s: s.name):
            tags = f"  [{', '.join(spec.tags[1:])}]" if spec.tags[1:] else ""
            lines += [f"  {spec.name.ljust(width)}  {spec.description}",
                      f"  {''.ljust(width)}  {spec.cls.__name__}{spec.signature}{tags}"]
    lines += [f"  {name.ljust(width)}  (defined twice: {' and '.join(srcs)})" for name, srcs in registry.duplicates.items()]
    lines += [f"  warning: {warning}" for warning in registry.warnings]
    return "\n".join(
        [
            "attnlab: see what a change to self-attention does, stage by stage.",
            "",
            "Usage: python -m attnlab [variant=NAME] [seed=N] [d_out=N] [inputs=book|random|file|text] [key=value ...]",
            "       python -m attnlab -m variant=reference,unscaled seed=1,2,3     (a sweep)",
            "       attnlab compare PATH... [--out FILE] [--filter key=value]",
            "",
            "Variants (variant=NAME; params as variant.params.KEY=VALUE), by group; in Python",
            "attnlab.list_variants(tag=GROUP) lists a group, or a [tag] shown after a constructor.",
            "Any Hugging Face attention class, built from its config class: variant=hf:MODEL_TYPE (e.g. hf:llama),",
            "attn_implementation=eager|sdpa, config attributes as variant.params.NAME (pip install 'attnlab[hf]').",
            *lines,
        ]
    )


def user_config_dir() -> Path | None:
    """./conf in the working folder, unless it is attnlab's own (running from a clone)."""
    folder = Path.cwd() / USER_CONFIG
    return folder if folder.is_dir() and folder.resolve() != config_dir().resolve() else None


def user_config_searchpath() -> list[str]:
    """`hydra.searchpath` (a resolver: an entry for a folder that does not exist makes Hydra warn)."""
    folder = user_config_dir()
    return [f"file://{folder}"] if folder is not None else []


def group_options(group: str) -> tuple[list[str], list[str]]:
    """(attnlab's options, the working folder's) of a config group: its YAML files."""
    builtin = sorted(p.stem for p in (config_dir() / group).glob("*.yaml"))
    folder = user_config_dir()
    own = sorted({p.stem for p in (folder / group).glob("*.yaml")} - set(builtin)) if folder is not None else []
    return builtin, own


def groups_help() -> str:
    """The config groups a user picks from (the input schemas attnlab registers are left out)."""
    lines = []
    for group, what in (("inputs", "inputs=NAME"), ("sink", "switched by log.NAME"), ("experiment", "+experiment=NAME")):
        builtin, own = group_options(group)
        yours = f"; yours: {', '.join(own)}" if own else ""
        lines.append(f"{group} ({what}): {', '.join(builtin)}{yours}")
    return "\n".join(lines)


def keys_help() -> str:
    """Every key of the schema: its default, what is allowed, what it does."""
    width = max(len(key.name) for key in KEYS)
    return "\n".join(f"{key.name.ljust(width)}  default {show_value(key.default)}; {key.allowed}; {key.help}" for key in KEYS)


def outputs_node() -> dict[str, Any]:
    """The sinks in the config (`sink.NAME` from the group, in order), their switches (attnlab's
    on, yours off until log.NAME=true) and Hydra's folder names without the switches."""
    builtin, own = group_options("sink")
    log = {**{name: name not in OPT_IN_SINKS for name in builtin}, **{name: False for name in own}, **LOG_OPTIONS}
    return {
        "defaults": [{f"sink@sink.{name}": name} for name in [*builtin, *own]],
        "log": log,
        "hydra": {"job": {"config": {"override_dirname": {"exclude_keys": [f"log.{name}" for name in log]}}}},
    }


def new_dir(path: str) -> str:
    """`path` if nothing is there yet, else `path-2`, `path-3`, ...; the folder is created here.

    Why: a run's folder (and a sweep's) is named by the second it started, and two runs of one
    variant started in the same second (a shell loop with `&`) took the same folder, the second
    overwriting the first. Creating it with an exclusive mkdir makes the claim atomic between
    processes; the resolver is cached, and Hydra copies a sweep's resolver cache into every
    job's config (joblib and submitit workers included), so a run resolves its folder once.
    """
    if ".." in Path(path).parts:  # from a name in the template (variant.name): never outside runs/
        raise UserError(f"{path}: a folder attnlab names may not contain '..'")
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    for suffix in itertools.chain([""], (f"-{n}" for n in itertools.count(2))):
        try:
            os.mkdir(path + suffix)
        except FileExistsError:
            continue
        return path + suffix
    raise AssertionError("unreachable")


def job_dirname(overrides: str) -> str:
    """A sweep job's folder name from its overrides, safe as one path component inside the sweep's folder.

    Why: Hydra names it from the override text as typed, so `inputs.path=x/../a.csv` wrote the job
    outside hydra.sweep.dir and a long value overflowed the file system's name limit. Separators and
    `..` are replaced and a long name cut; either adds a hash of the full text, so two jobs never
    share a folder. The full overrides stay in the job's .hydra/overrides.yaml (and its config in the record).
    """
    safe = re.sub(r"[^\w.,=+@%\[\]-]", "_", overrides, flags=re.ASCII).replace("..", "_")
    if safe == overrides and len(safe) <= JOB_DIRNAME_MAX:
        return safe
    digest = hashlib.sha1(overrides.encode("utf-8", "surrogatepass")).hexdigest()[:8]
    return f"{safe[:JOB_DIRNAME_MAX - 9]}-{digest}"


def register_configs(registry: Registry | None = None, *, full_help: bool = False) -> None:
    """attnlab's configs in Hydra's ConfigStore. `full_help` (the command line asks for --help):
    the help text with every variant; otherwise a one-line pointer to it, since Hydra composes and
    saves the help with every job's config (the full text was ~15 KB of YAML per job)."""
    registry = registry or discover()
    # Hydra's public registration: the sweeper is found even when Hydra scanned for plugins
    # earlier in this process (another Hydra app ran first), and with any install layout.
    Plugins.instance().register(AttnlabSweeper)
    if not OmegaConf.has_resolver("attnlab.new_dir"):
        OmegaConf.register_new_resolver("attnlab.new_dir", new_dir, use_cache=True)
        OmegaConf.register_new_resolver("attnlab.user_config", user_config_searchpath)
        OmegaConf.register_new_resolver("attnlab.job_dirname", job_dirname)
    store = ConfigStore.instance()
    store.store(name="attnlab_schema", node=Config)
    store.store(name="attnlab_outputs", node=outputs_node())
    for name, schema in INPUT_SCHEMAS.items():
        store.store(group="attnlab/inputs", name=name, node=schema)
    for name, spec in registry.specs.items():
        store.store(group="variant", name=name, node=VariantConf(name=name, params=dict(spec.params)))
    store.store(
        group="hydra/help",
        name="attnlab",
        node={
            "app_name": "attnlab",
            "header": help_header(registry) if full_help else "attnlab: python -m attnlab --help lists everything",
            "footer": "Docs: README.md and docs/guide/. Powered by Hydra (https://hydra.cc).",
            "template": ("${hydra.help.header}\n\n== Config groups ==\n" + groups_help().replace("$", "$$") + "\n\n"
                         "== Keys ==\n" + keys_help().replace("$", "$$") + "\n\n"
                         "== Config ==\nOverride anything in the config (e.g. seed=7, d_out=4)\n\n$CONFIG\n"
                         "${hydra.help.footer}\n") if full_help else "${hydra.help.header}",
        },
        provider="attnlab",
    )


OPEN_BLOCKS = ("expect", "model", "reference_model")  # open-ended keys: attnlab adds Hydra's `++` for them


def user_overrides(args: list[str]) -> list[str]:
    """`expect.context_shape=[6,2]` and `model.n_layer=2` as users write them: open-ended keys,
    which Hydra's struct mode would make them spell `++expect...`; attnlab adds the `++` for them,
    and for `variant.params.NAME` and `reference.params.NAME` (a config attribute of a config-built
    class is set with or without `+`; `reference.params` is stored as `reference_params`).
    `model=hf:gpt2` names the model: `model.name`; `variant=hf:llama` the variant: `variant.name`."""
    return [_hf_variant(_open_key(arg)) for arg in args]


def _open_key(arg: str) -> str:
    key, eq, value = arg.lstrip("+").partition("=")
    if eq and key in OPEN_BLOCKS[1:]:
        return f"++{key}.name={value}"
    if key.startswith("reference.params."):
        return f"++reference_params.{arg.lstrip('+').removeprefix('reference.params.')}"
    opened = key.split(".")[0] in OPEN_BLOCKS or key.startswith("variant.params.")
    return f"++{arg.lstrip('+')}" if opened and "." in key and eq else arg


def _hf_variant(arg: str) -> str:
    """`variant=hf:llama` names no option of the variant group (hf: names are not members, so
    `+experiment=all_variants` does not sweep every model type): it sets the variant's name."""
    key, _, value = arg.partition("=")
    if key.lstrip("+") == "variant" and value.startswith("hf:"):
        return f"variant.name={value}"
    return arg


def validate(cfg: DictConfig) -> None:
    """Checks beyond the schema's types, so that a bad value fails before any work."""
    unknown_keys(cfg)
    check_inputs(cfg.inputs)
    check_values(cfg)
    if not isinstance(cfg.variant.params, (dict, DictConfig)):
        raise UserError("variant.params: must be a mapping of constructor arguments")


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
    top = next((k for k in CONSTRUCTOR_KEYS if leaf in SPELLINGS.get(k, (k,))), None)
    if parent == "variant.params" and top is not None:
        what = "a top-level key" if top == leaf else f"the top-level key {top}"
        return f"{key}: {leaf} is {what}; use {top}={value}"
    siblings = {k.rpartition(".")[2]: k for k in known if k.rpartition(".")[0] == parent}
    close = [siblings[c] for c in difflib.get_close_matches(leaf, list(siblings), n=1, cutoff=0.6)]
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
    try:
        GlobalHydra.instance().clear()
        with initialize_config_dir(config_dir=str(config_dir()), version_base="1.3"):
            cfg = compose(config_name="config", overrides=[g for g in groups if "," not in g])
        known = [k for k, _ in _dotted(cfg)]
    except Exception:  # noqa: BLE001 - the suggestion is a courtesy; the error stands without it
        known = []
    given = next((a.split("=", 1)[1] for a in args if a.split("=", 1)[0].lstrip("+") == key), "VALUE")
    return unknown_key_message(key, known, given)
