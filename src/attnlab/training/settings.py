"""The `training` config group's schema and its checks: one line for a bad value, before any work."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from attnlab.errors import UserError

INITS = ("default", "normal")


@dataclass
class ModelSizes:
    n_layers: int = 2
    d_model: int = 64
    num_heads: int = 4
    context_length: int = 32
    head_dim: int | None = None  # None: d_model / num_heads; narrower heads are projected back to d_model


@dataclass
class TrainingConf:
    """The structured config of `training=NAME` (conf/training/NAME.yaml)."""

    task: str = "induction"  # a name in attnlab.training.tasks.TASKS
    steps: int = 200
    lr: Any = 3e-3  # a rate, or a grid [1e-3, 3e-3, 1e-2]: each side compared at its best (attnlab.training.lr_grid)
    batch: int = 32
    warmup: int = 20  # linear warm-up steps, then cosine decay to zero
    clip: float = 1.0  # gradient norm clip
    weight_decay: float = 0.1
    init: str = "default"  # default: PyTorch's | normal: the attention's q/k/v redrawn as weights_init=normal
    eval_every: int = 25  # steps between evaluations (teacher-forced and causal)
    eval_batch: int = 64  # sequences in the fixed evaluation set
    checkpoint_every: int = 50  # steps between a job's checkpoints (and one at SIGTERM); 0: only at SIGTERM
    target_accuracy: float = 0.9  # "steps to" this causal accuracy
    vocab: int = 64  # induction and mqar; text: the file's characters
    pairs: int = 4  # mqar: key-value pairs per sequence
    path: str | None = None  # text: a UTF-8 text file
    head_probes: bool = True  # per-head entropy, largest weight, induction score at every evaluation
    model: ModelSizes = field(default_factory=ModelSizes)


def attention_width(sizes: ModelSizes) -> int:
    """The attention layer's output width: its heads side by side."""
    return sizes.d_model if sizes.head_dim is None else sizes.num_heads * sizes.head_dim


@dataclass(frozen=True)
class TrainingRequest:
    """A training job as the app read it from the config (attnlab.app.job_settings.training_request)."""

    variant: str
    settings: TrainingConf
    device: str
    seeds: range


def _positive_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 1


def check_settings(s: TrainingConf) -> None:
    """Every value alone and the sizes together; the first bad one is a UserError of one line."""
    if s.init not in INITS:
        raise UserError(f"training.init={s.init}: allowed are {', '.join(INITS)}")
    counts = {"steps": s.steps, "batch": s.batch, "eval_every": s.eval_every, "eval_batch": s.eval_batch,
              "vocab": s.vocab, "pairs": s.pairs,
              **{f"model.{k}": v for k, v in vars(s.model).items() if not (k == "head_dim" and v is None)}}
    for name, value in counts.items():
        if not _positive_int(value):
            raise UserError(f"training.{name}={value}: must be a positive integer (1, 2, 3, ...)")
    rates = s.lr if isinstance(s.lr, (list, tuple)) else [s.lr]
    if not rates or not all(isinstance(r, (int, float)) and not isinstance(r, bool) and r > 0 for r in rates):
        raise UserError(f"training.lr={s.lr}: must be a number > 0 or a list of them (a grid: [1e-3,3e-3,1e-2])")
    for name in ("clip",):
        if not (isinstance(getattr(s, name), (int, float)) and getattr(s, name) > 0):
            raise UserError(f"training.{name}={getattr(s, name)}: must be a number > 0")
    for name in ("warmup", "weight_decay"):
        if not (isinstance(getattr(s, name), (int, float)) and getattr(s, name) >= 0):
            raise UserError(f"training.{name}={getattr(s, name)}: must be a number >= 0")
    if not (_positive_int(s.checkpoint_every) or s.checkpoint_every == 0):
        raise UserError(f"training.checkpoint_every={s.checkpoint_every}: must be an integer >= 0 (0: only at SIGTERM)")
    if not 0 < s.target_accuracy <= 1:
        raise UserError(f"training.target_accuracy={s.target_accuracy}: must be in (0, 1]")
    if s.model.head_dim is None and s.model.d_model % s.model.num_heads:
        raise UserError(f"training.model.num_heads={s.model.num_heads}: must divide d_model={s.model.d_model}")
