"""The config schema and the sweeper registered with Hydra: every variant, every sink, the help.

Every discovered variant becomes an option of the Hydra group `variant` through the
ConfigStore, so a plugin never needs a YAML file; `--help` lists them with their descriptions.
Every sink config found in the group `sink` (attnlab's conf/sink/ and ./conf/sink/ in the
working folder) joins the config under `sink.NAME`, switched by `log.NAME`: the one list of
switches is built here from the sinks found, so a sink of your own needs no edit to attnlab.
"""

from __future__ import annotations

from typing import Any

from hydra.core.config_store import ConfigStore
from hydra.core.plugins import Plugins

from attnlab.app.config_paths import group_options
from attnlab.app.help_text import groups_help, help_header, keys_help
from attnlab.app.resolvers import register_resolvers
from attnlab.inputs.input_configs import SCHEMAS as INPUT_SCHEMAS
from attnlab.modules.registry import Registry, discover
from attnlab.schema import LOG_OPTIONS, Config, VariantConf
from attnlab.training.counterparts import MODEL_CHANGES
from attnlab.training.settings import TrainingConf
from hydra_plugins.attnlab_sweeper.attnlab_sweeper import AttnlabSweeper

OPT_IN_SINKS = {"mlflow"}  # attnlab's sinks that stay off until log.NAME=true: they need an extra installed


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


def register_configs(registry: Registry | None = None, *, full_help: bool = False) -> None:
    """attnlab's configs in Hydra's ConfigStore. `full_help` (the command line asks for --help):
    the help text with every variant; otherwise a one-line pointer to it, since Hydra composes and
    saves the help with every job's config (the full text was ~15 KB of YAML per job)."""
    registry = registry or discover()
    # Hydra's public registration: the sweeper is found even when Hydra scanned for plugins
    # earlier in this process (another Hydra app ran first), and with any install layout.
    Plugins.instance().register(AttnlabSweeper)
    register_resolvers()
    store = ConfigStore.instance()
    outputs = outputs_node()
    stored = None if full_help else (id(store.repo), repr(outputs), variant_nodes(registry))
    if stored is not None and _STORED[0] == stored:
        return  # the store holds these nodes already: storing ~70 again was most of a warm API call's own time
    _STORED[0] = None
    store.store(name="attnlab_schema", node=Config)
    store.store(name="attnlab_outputs", node=outputs)
    for name, schema in INPUT_SCHEMAS.items():
        store.store(group="attnlab/inputs", name=name, node=schema)
    store.store(group="attnlab/training", name="schema", node=TrainingConf)
    for name, spec in registry.specs.items():
        store.store(group="variant", name=name, node=VariantConf(name=name, params=dict(spec.params)))
    for name in MODEL_CHANGES:  # training's changes of the model (attnlab.training.counterparts)
        store.store(group="variant", name=name, node=VariantConf(name=name))
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
    _STORED[0] = stored


# What register_configs last stored, by what decides each node: a registry rebuilt with the same
# variants (a new session, a refresh with no change) stores the same nodes.
_STORED: list[Any] = [None]


def variant_nodes(registry: Registry) -> tuple[tuple[str, str], ...]:
    """The `variant` group's nodes a registry makes: each variant's name and parameters."""
    return tuple((name, repr(spec.params)) for name, spec in registry.specs.items())
