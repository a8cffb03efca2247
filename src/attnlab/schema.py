"""The config's one schema: every key with its type, default and allowed values, in `KEYS`.

Hydra's structured config (`Config`) is generated from `KEYS`, so the YAML (attnlab/conf/
config.yaml sets no value of its own), the job, the constructor filling
(attnlab.modules.registry) and the checks all read the same defaults. Scalar keys are typed
`Any` in the structured config and checked against `KEYS`: OmegaConf would turn `qkv_bias=2` into
true and `seed=1.5` into an error of its own wording. The app's `check_values`
(attnlab.app.config_values) raises one line, `KEY=VALUE: what is allowed`, for every job of a sweep
before the first. Adding a key is one entry of `KEYS` (and one of the app's relations when it
constrains another key).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field, make_dataclass
from enum import Enum
from typing import Any

SEED_MAX = 2**64 - 1  # torch.manual_seed takes [-2**63, 2**64 - 1]; negative seeds are refused
PROFILE_BUDGET_MAX_S = 3600.0  # one module's timing budget; larger would be a run that never ends
BOOK_TOKENS = 6  # the source's six tokens: context_length for a module built without inputs


class WeightsMode(Enum):
    shared = "shared"  # every module gets the seeded W_query, W_key, W_value
    native = "native"  # each module builds its own parameters after torch.manual_seed(seed)


class WeightsInit(Enum):
    rand = "rand"  # the source's torch.rand(d_in, d_out): entries in [0, 1), mean 0.5
    normal = "normal"  # torch.randn(d_in, d_out) / sqrt(d_in): zero mean, q.k has variance ~ d_k


def is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _number(value: Any) -> bool:
    return (is_int(value) or isinstance(value, float)) and math.isfinite(value)


@dataclass(frozen=True)
class Key:
    """One scalar key: `ok(value)` says whether a value is allowed, `allowed` says it in words."""

    name: str  # dotted for a nested key: show.head
    default: Any
    allowed: str
    ok: Callable[[Any], bool]
    nullable: bool = False  # None (null) is allowed too
    help: str = ""

    def accepts(self, value: Any) -> bool:
        return (self.nullable and value is None) or (value is not None and self.ok(value))


def count(name: str, default: int | None, help: str, nullable: bool = False) -> Key:
    return Key(name, default, "must be a positive integer (1, 2, 3, ...)" + (" or null" if nullable else ""),
               lambda v: is_int(v) and v >= 1, nullable, help)


def index(name: str, help: str) -> Key:
    return Key(name, 0, "must be an integer >= 0", lambda v: is_int(v) and v >= 0, help=help)


def flag(name: str, default: bool, help: str) -> Key:
    return Key(name, default, "must be true or false", lambda v: isinstance(v, bool), help=help)


def choice(name: str, default: str, options: tuple[str, ...], help: str) -> Key:
    return Key(name, default, f"allowed are {', '.join(options)}", lambda v: v in options, help=help)


def seconds(name: str, default: float | None, most: float, help: str, nullable: bool = False) -> Key:
    return Key(name, default, f"must be a number of seconds in (0, {most:g}]" + (" or null" if nullable else ""),
               lambda v: _number(v) and 0 < v <= most, nullable, help)


_STACK_LAYER = re.compile(r"^(encoder|decoder|cross)\.\d+$")
DTYPES = ("float32", "float64", "bfloat16", "float16")
ATTN_IMPLEMENTATIONS = ("eager", "sdpa", "flex_attention")  # a Hugging Face attention class's kernels
LOG_OPTIONS = {"images": True, "histograms": True, "progress": True}  # log.* switches that are not sinks


def _layers(value: Any) -> bool:
    """`layer=`: an index, all, or a list of indices (their range needs the model: attnlab.model.locate);
    an encoder–decoder's index names its stack, encoder.1 (attnlab.model.stacks)."""
    values = list(value) if isinstance(value, (list, tuple)) else [value]
    return value == "all" or all((is_int(v) and v >= 0) or bool(_STACK_LAYER.match(str(v))) for v in values)

KEYS: tuple[Key, ...] = (
    Key("seed", 123, f"must be an integer in [0, {SEED_MAX}] (torch's seed range)",
        lambda v: is_int(v) and 0 <= v <= SEED_MAX, help="torch.manual_seed(seed), then W_query, W_key, W_value"),
    count("n_seeds", 1, "run seeds seed .. seed+n_seeds-1 inside one job"),
    count("d_out", 2, "the width of queries, keys, values and the context"),
    count("context_length", None, "passed to modules that take it; null: n_tokens", nullable=True),
    Key("dropout", 0.0, "must be a number in [0, 1)", lambda v: _number(v) and 0 <= v < 1,
        help="passed to modules that take it; active with train=true"),
    count("num_heads", 2, "passed to modules that take it"),
    count("num_kv_heads", None, "passed to modules that take it; null: num_heads", nullable=True),
    flag("qkv_bias", False, "passed to modules that take it"),
    choice("attn_implementation", "eager", ATTN_IMPLEMENTATIONS, "a Hugging Face attention class's kernel"),
    count("batch", 2, "batch items for batched modules (the book inputs stacked, as the source does)"),
    flag("train", False, "training mode with seeded dropout; false: eval mode"),
    Key("reference", "auto", "must be auto or a variant's name", lambda v: isinstance(v, str) and v != "",
        help="auto: chosen from how the variant is declared"),
    index("show.head", "the head the terminal and heatmaps show"),
    index("show.batch", "the batch item the terminal and heatmaps show"),
    choice("dtype", "float32", DTYPES, "the variant's dtype"),
    choice("reference_dtype", "float32", DTYPES, "the reference's dtype"),
    choice("device", "cpu", ("cpu", "cuda", "mps", "auto"), "auto: CUDA, then MPS, else the CPU"),
    flag("profile", False, "forward time, peak memory and FLOPs of each module"),
    seconds("profile_budget_s", 0.5, PROFILE_BUDGET_MAX_S, "time spent timing each module's forward"),
    flag("profile_backward", False, "also time the backward pass"),
    seconds("timeout_s", None, float("inf"), "a job still running after this long fails; null: no limit",
            nullable=True),
    Key("layer", None, "must be a layer index, all, or a list of them such as [0,2] (encoder.1, decoder.0 in an encoder–decoder)", _layers, nullable=True,
        help="with model=: the layers compared; null: 0 (all with reference_model)"),
)
DEFAULTS: dict[str, Any] = {key.name: key.default for key in KEYS}


def show_value(value: Any) -> str:
    """A value as the command line spells it (null, true, false)."""
    return "null" if value is None else str(value).lower() if isinstance(value, bool) else str(value)


@dataclass
class VariantConf:
    name: str = "reference"
    params: dict[str, Any] = field(default_factory=dict)


@dataclass
class PlotsConf:
    # what a sweep's comparison.html and TensorBoard draw against each swept numeric key (names or
    # globs: divergence_context_h* is one plot per head); None: attnlab.reporting.sweep_plots.DEFAULT_DIAGNOSTICS
    diagnostics: list[str] | None = None


def _scalar_fields(prefix: str = "") -> list[tuple[str, Any, Any]]:
    """`KEYS` under `prefix` as dataclass fields; a nested group (show.*) becomes a dataclass."""
    fields: list[tuple[str, Any, Any]] = []
    groups: dict[str, None] = {}  # the nested groups in order of first appearance
    for key in KEYS:
        if not key.name.startswith(prefix):
            continue
        name, dot, _ = key.name[len(prefix):].partition(".")
        if dot:
            groups.setdefault(name, None)
        else:
            fields.append((name, Any, key.default))
    for group in groups:
        cls = _dataclass(f"{group.title()}Conf", _scalar_fields(f"{prefix}{group}."))
        fields.append((group, cls, field(default_factory=cls)))
    return fields


def _dataclass(name: str, fields: list[tuple[str, Any, Any]]) -> type:
    """A dataclass of this module, by name: a submitit or SLURM worker unpickles the job's
    config, which finds its classes as `attnlab.schema.NAME`."""
    cls = make_dataclass(name, fields)
    cls.__module__ = __name__
    globals()[name] = cls
    return cls


@dataclass(frozen=True)
class ChoiceKey:
    """A key typed by an Enum (Hydra checks its values): its default and what each option does."""

    name: str
    default: Enum
    help: str

    @property
    def allowed(self) -> str:
        return "allowed are " + ", ".join(option.value for option in type(self.default))


CHOICE_KEYS = (
    ChoiceKey("weights", WeightsMode.shared, "shared: every module gets the reference's seeded W_query, W_key, "
              "W_value (loaded into its own layout); native: each module builds its own after torch.manual_seed(seed)"),
    ChoiceKey("weights_init", WeightsInit.rand, "rand: the source's torch.rand(d_in, d_out); "
              "normal: torch.randn(d_in, d_out) / sqrt(d_in), zero mean"),
)

# The structured config Hydra composes into: the scalar keys from KEYS, then the open groups.
Config = _dataclass("Config", [
    ("variant", VariantConf, field(default_factory=VariantConf)),
    ("inputs", Any, None),  # the group `inputs`: a structured config of attnlab.inputs.kinds, or your own
    ("training", Any, None),  # the group `training`: attnlab.training.settings.TrainingConf; null: a forward run
    *_scalar_fields(),
    *((key.name, type(key.default), key.default) for key in CHOICE_KEYS),
    ("reference_params", dict[str, Any], field(default_factory=dict)),  # an explicit reference's, reference.params.NAME
    ("expect", dict[str, Any], field(default_factory=dict)),  # predictions, e.g. expect.context_shape=[6,2]
    # a run inside a model (attnlab.model): model=hf:TYPE | NAME (./models/) | model.path=DIR | model.hub=ID,
    # with size keys (model.n_layer=2); open blocks, their keys checked by attnlab.model.model_spec
    ("model", dict[str, Any], field(default_factory=dict)),
    ("reference_model", dict[str, Any], field(default_factory=dict)),  # the learner's check, as model
    # an edit to a model's layer as data: intervene=ablate_head intervene.head=0 (attnlab.model.interventions)
    ("intervene", dict[str, Any], field(default_factory=dict)),
    ("plots", PlotsConf, field(default_factory=PlotsConf)),
    ("log", dict[str, bool], field(default_factory=dict)),  # log.NAME for every sink found, and LOG_OPTIONS
    ("sink", dict[str, Any], field(default_factory=dict)),  # sink.NAME: each sink's config (_target_ and options)
])

