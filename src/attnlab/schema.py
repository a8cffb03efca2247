"""The config's schema: every top-level key with its type and default, as Hydra's structured config.

The YAML (attnlab/conf/config.yaml) sets the same defaults; records store the config as `resolved`
gives it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Dict, List, Optional

from omegaconf import DictConfig, OmegaConf


class WeightsMode(Enum):
    shared = "shared"  # every module gets the seeded W_query, W_key, W_value
    native = "native"  # each module builds its own parameters after torch.manual_seed(seed)


class WeightsInit(Enum):
    rand = "rand"  # the source's torch.rand(d_in, d_out): entries in [0, 1), mean 0.5
    normal = "normal"  # torch.randn(d_in, d_out) / sqrt(d_in): zero mean, q.k has variance ~ d_k


@dataclass
class VariantConf:
    name: str = "reference"
    params: Dict[str, Any] = field(default_factory=dict)


@dataclass
class ShowConf:
    head: int = 0  # which head's weights and context the terminal prints
    batch: int = 0  # which batch item the terminal and the heatmaps show


@dataclass
class PlotsConf:
    # what a sweep's comparison.html and TensorBoard draw against each swept numeric key (names or
    # globs: divergence_context_h* is one plot per head); None: attnlab.reporting.sweep_plots.DEFAULT_DIAGNOSTICS
    diagnostics: Optional[List[str]] = None


@dataclass
class Config:
    variant: VariantConf = field(default_factory=VariantConf)
    inputs: Any = None  # the group `inputs`: a structured config of attnlab.inputs.kinds, or your own
    seed: int = 123
    n_seeds: int = 1
    d_out: int = 2
    # passed by name to every module whose constructor takes them (variant and reference)
    context_length: Optional[int] = None  # None: n_tokens
    dropout: float = 0.0
    num_heads: int = 2
    num_kv_heads: Optional[int] = None  # None: num_heads
    qkv_bias: bool = False
    attn_implementation: str = "eager"  # a Hugging Face attention class's kernel: eager | sdpa | flex_attention
    batch: int = 2  # batched modules get this many items; the book inputs are stacked
    train: bool = False  # training mode (dropout active, seeded)
    reference: str = "auto"  # auto | the name of any variant
    reference_params: Dict[str, Any] = field(default_factory=dict)  # an explicit reference's, as variant.params
    show: ShowConf = field(default_factory=ShowConf)
    dtype: str = "float32"  # the variant's dtype: float32 | float64 | bfloat16 | float16
    reference_dtype: str = "float32"
    device: str = "cpu"  # cpu | cuda | mps | auto
    profile: bool = False  # time and memory of each module's plain forward
    profile_budget_s: float = 0.5
    profile_backward: bool = False
    save_stages: bool = False  # also write every stage in full next to record.json (safetensors)
    weights: WeightsMode = WeightsMode.shared
    weights_init: WeightsInit = WeightsInit.rand
    expect: Dict[str, Any] = field(default_factory=dict)
    plots: PlotsConf = field(default_factory=PlotsConf)
    log: Dict[str, bool] = field(default_factory=dict)  # log.NAME for every sink found, and LOG_OPTIONS
    sink: Dict[str, Any] = field(default_factory=dict)  # sink.NAME: each sink's config (_target_ and options)


def resolved(cfg: DictConfig) -> dict[str, Any]:
    """The config as plain JSON-able containers (enums as their names), as stored in records."""
    return OmegaConf.to_container(cfg, resolve=True, enum_to_str=True)
