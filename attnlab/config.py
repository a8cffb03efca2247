"""The config schema, its registration with Hydra, and the checks Hydra's types cannot make.

Every discovered variant becomes an option of the Hydra group `variant` through the
ConfigStore, so a plugin never needs a YAML file; `--help` lists them with their descriptions.
"""

from __future__ import annotations

import importlib
import itertools
import os
import sys
from dataclasses import dataclass, field
from enum import Enum
from importlib import resources
from pathlib import Path
from types import ModuleType
from typing import Any, Dict, List, Optional

from hydra.core.config_store import ConfigStore
from omegaconf import DictConfig, OmegaConf

from attnlab.errors import UserError
from attnlab.registry import Registry, discover


class WeightsMode(Enum):
    shared = "shared"  # every module gets the seeded W_query, W_key, W_value
    native = "native"  # each module builds its own parameters after torch.manual_seed(seed)


class WeightsInit(Enum):
    rand = "rand"  # the source's torch.rand(d_in, d_out): entries in [0, 1), mean 0.5
    normal = "normal"  # torch.randn(d_in, d_out) / sqrt(d_in): zero mean, q.k has variance ~ d_k


class Distribution(Enum):
    uniform = "uniform"
    normal = "normal"


@dataclass
class VariantConf:
    name: str = "reference"
    params: Dict[str, Any] = field(default_factory=dict)


@dataclass
class InputsConf:
    kind: str = "book"  # book | random | file
    n_tokens: Optional[int] = None
    d_in: Optional[int] = None
    distribution: Distribution = Distribution.uniform
    path: Optional[str] = None
    labels: Optional[List[str]] = None
    embeddings: Optional[List[Any]] = None  # rows are checked by attnlab.inputs, not by type


@dataclass
class LogConf:
    terminal: bool = True
    tensorboard: bool = True
    images: bool = True
    histograms: bool = True
    table: bool = True
    progress: bool = True


@dataclass
class ShowConf:
    head: int = 0  # which head's weights and context the terminal prints
    batch: int = 0  # which batch item the terminal and the heatmaps show


@dataclass
class Config:
    variant: VariantConf = field(default_factory=VariantConf)
    inputs: InputsConf = field(default_factory=InputsConf)
    seed: int = 123
    n_seeds: int = 1
    d_out: int = 2
    # passed by name to every module whose constructor takes them (variant and reference)
    context_length: Optional[int] = None  # None: n_tokens
    dropout: float = 0.0
    num_heads: int = 2
    num_kv_heads: Optional[int] = None  # None: num_heads
    qkv_bias: bool = False
    batch: int = 2  # batched modules get this many items; the book inputs are stacked
    train: bool = False  # training mode (dropout active, seeded)
    reference: str = "auto"  # auto | the name of any variant
    show: ShowConf = field(default_factory=ShowConf)
    dtype: str = "float32"  # the variant's dtype: float32 | float64 | bfloat16 | float16
    reference_dtype: str = "float32"
    device: str = "cpu"  # cpu | cuda | mps | auto
    profile: bool = False  # time and memory of each module's plain forward
    profile_budget_s: float = 1.0
    profile_backward: bool = False
    save_stages: bool = False  # also write every stage in full next to record.json (safetensors)
    weights: WeightsMode = WeightsMode.shared
    weights_init: WeightsInit = WeightsInit.rand
    expect: Dict[str, Any] = field(default_factory=dict)
    log: LogConf = field(default_factory=LogConf)


INPUT_KINDS = ("book", "random", "file")


def config_dir() -> Path:
    return Path(str(resources.files("attnlab.conf")))


def help_header(registry: Registry) -> str:
    width = max((len(n) for n in registry.names()), default=0)
    lines = [f"  {name.ljust(width)}  {spec.description}\n  {''.ljust(width)}  {spec.cls.__name__}{spec.signature}" for name, spec in registry.specs.items()]
    lines += [f"  {name.ljust(width)}  (defined twice: {' and '.join(srcs)})" for name, srcs in registry.duplicates.items()]
    lines += [f"  warning: {warning}" for warning in registry.warnings]
    return "\n".join(
        [
            "attnlab: see what a change to self-attention does, stage by stage.",
            "",
            "Usage: python -m attnlab [variant=NAME] [seed=N] [d_out=N] [inputs=book|random|file] [key=value ...]",
            "       python -m attnlab -m variant=reference,unscaled seed=1,2,3     (a sweep)",
            "       attnlab compare PATH... [--out FILE] [--filter key=value]",
            "",
            "Variants (variant=NAME; params as variant.params.KEY=VALUE):",
            *lines,
        ]
    )


HYDRA_PLUGIN_ROOT = Path(__file__).parent / "hydra_plugin_root"
SWEEPER_MODULE = "hydra_plugins.attnlab_sweeper.attnlab_sweeper"


def use_attnlab_sweeper() -> ModuleType:
    """Put attnlab's sweeper where Hydra looks for plugins: the `hydra_plugins` namespace.

    It ships inside the package and joins that namespace only in attnlab's own process, through
    sys.path, because an editable install's finder hides namespace portions from Hydra's plugin
    scan, and other Hydra apps in the environment should not scan it at all. Imported here as
    well, so its `hydra/sweeper=attnlab` option exists even if Hydra scanned its plugins earlier
    in this process (a notebook).
    """
    root = str(HYDRA_PLUGIN_ROOT)
    if root not in sys.path:
        sys.path.append(root)
    return importlib.import_module(SWEEPER_MODULE)


def new_dir(path: str) -> str:
    """`path` if nothing is there yet, else `path-2`, `path-3`, ...; the folder is created here.

    Why: a run's folder (and a sweep's) is named by the second it started, and two runs of one
    variant started in the same second (a shell loop with `&`) took the same folder, the second
    overwriting the first. Creating it with an exclusive mkdir makes the claim atomic between
    processes; the resolver is cached, and Hydra copies a sweep's resolver cache into every
    job's config (joblib and submitit workers included), so a run resolves its folder once.
    """
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    for suffix in itertools.chain([""], (f"-{n}" for n in itertools.count(2))):
        try:
            os.mkdir(path + suffix)
        except FileExistsError:
            continue
        return path + suffix
    raise AssertionError("unreachable")


def register_configs(registry: Registry | None = None) -> None:
    registry = registry or discover()
    use_attnlab_sweeper()
    if not OmegaConf.has_resolver("attnlab.new_dir"):
        OmegaConf.register_new_resolver("attnlab.new_dir", new_dir, use_cache=True)
    store = ConfigStore.instance()
    store.store(name="attnlab_schema", node=Config)
    for name, spec in registry.specs.items():
        store.store(group="variant", name=name, node=VariantConf(name=name, params=dict(spec.params)))
    store.store(
        group="hydra/help",
        name="attnlab",
        node={
            "app_name": "attnlab",
            "header": help_header(registry),
            "footer": "Docs: README.md. Powered by Hydra (https://hydra.cc).",
            "template": "${hydra.help.header}\n\n== Config groups ==\n$APP_CONFIG_GROUPS\n"
            "== Config ==\nOverride anything in the config (e.g. seed=7, d_out=4)\n\n$CONFIG\n${hydra.help.footer}\n",
        },
        provider="attnlab",
    )


def user_overrides(args: list[str]) -> list[str]:
    """`expect.context_shape=[6,2]` as users write it: predictions are open-ended keys, which
    Hydra's struct mode would make them spell `++expect...`; attnlab adds the `++` for them."""
    return [f"++{arg}" if arg.startswith("expect.") else arg for arg in args]


def validate(cfg: DictConfig) -> None:
    """Checks beyond the schema's types, so that a bad value fails before any work."""
    _positive(cfg.d_out, "d_out")
    _positive(cfg.n_seeds, "n_seeds")
    if cfg.seed < 0:
        raise UserError(f"seed={cfg.seed}: must be a non-negative integer")
    kind = cfg.inputs.kind
    if kind not in INPUT_KINDS:
        raise UserError(f"inputs.kind={kind}: unknown input kind; allowed: {', '.join(INPUT_KINDS)}")
    if kind == "random":
        _positive(cfg.inputs.n_tokens, "inputs.n_tokens")
        _positive(cfg.inputs.d_in, "inputs.d_in")
    if kind == "file" and not cfg.inputs.path:
        raise UserError("inputs.path is missing: inputs=file needs inputs.path=FILE (.csv, .json or .npy)")
    if not isinstance(cfg.variant.params, (dict, DictConfig)):
        raise UserError("variant.params: must be a mapping of constructor arguments")


def _positive(value: Any, key: str) -> None:
    if value is None or not isinstance(value, int) or isinstance(value, bool) or value <= 0:
        raise UserError(f"{key}={value}: must be a positive integer (1, 2, 3, ...)")


def resolved(cfg: DictConfig) -> dict[str, Any]:
    """The config as plain JSON-able containers (enums as their names), as stored in records."""
    return OmegaConf.to_container(cfg, resolve=True, enum_to_str=True)
