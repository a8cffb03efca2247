"""The record: everything one run found, the only thing sinks read.

A record holds two sides, the variant's and the reference's, each its module's stages and
diagnostics. Stages are kept in the module's own rank (`side.stages[name].shape == side.shapes[name]`);
`side.canonical(name)` is the same values in the canonical view of `attnlab.capture.stages.AXES`
(batch, heads, ...), a reshape, never a copy.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import numpy as np

from attnlab.capture.stages import AXES


@dataclass(frozen=True)
class Finding:
    code: str  # e.g. "scaling"
    stage: str  # e.g. "scaled_scores"
    severity: str  # "error" | "info" (attnlab.diagnosis.finding_code.SEVERITIES)
    message: str  # one sentence a learner understands
    heads: list[int] | None = None  # the heads it holds for; None: the module has no heads axis, or it is about the split/merge
    batch: list[int] | None = None  # the batch items it holds for; None: the module takes no batch


@dataclass(frozen=True)
class Prediction:
    name: str  # e.g. "context_shape"
    expected: Any
    observed: Any
    passed: bool

    @property
    def sentence(self) -> str:
        """`predict context_shape = [6, 2]: FAIL (observed [6, 4])`, as every view says it."""
        observed = f"{self.observed:.4g}" if isinstance(self.observed, float) else self.observed
        return f"predict {self.name} = {self.expected}: {'pass' if self.passed else 'FAIL'} (observed {observed})"


@dataclass(frozen=True)
class Effect:
    """What a change does to a model's output: its next-token distributions against the unmodified
    run's (attnlab.model.effect), over every position of the text (of every text of a batch)."""

    kl_mean: float
    kl_max: float
    kl_clamped: float  # the most negative position KL float32 rounding made, clamped to 0
    top1_agreement: float  # the share of positions whose top-1 token agrees
    loss: float  # the mean next-token cross entropy on the text, unmodified
    loss_changed: float
    hidden_divergence: float  # max |difference| of the final hidden states
    hidden_relative_divergence: float
    non_finite_positions: int  # positions whose changed prediction holds NaN or infinity
    batch_items: list[Effect] | None = None  # a batch of texts: each item's own, in order; None: one text
    metrics: dict[str, float] | None = None  # intervene.metric: a measure of one's own, by its function's name
    positions: int | None = None  # a padded batch's: the positions scored (its texts' tokens); None: every token's

    def items(self) -> list[tuple[str, float]]:
        """(name, value) in field order, then the user's metrics by name: the diagnostics a record keeps
        of it (its numbers, not its items')."""
        return [*((f.name, getattr(self, f.name)) for f in fields(self) if f.name not in ("batch_items", "metrics", "positions")),
                *(self.metrics or {}).items()]


@dataclass(frozen=True, kw_only=True)
class ModelInfo:
    """A run inside a model: which model, which of its layers, and what the change did to its output.
    The model's facts first, then the layer's: the order record.json has always written them in."""

    model: str  # the model's label
    reference_model: str | None = None  # the learner's check: the model its layers are compared with
    n_layers: int
    parameters: int
    tokenizer: str
    heads: int
    kv_heads: int
    end_to_end: Effect | None = None  # the learner's check: both models whole
    layer: int
    attention: str  # the layer's attention module, by its qualified name
    stack: str | None = None  # an encoder–decoder's stack holding the layer (encoder, decoder); None: one stack
    replaced: str | None = None  # which attention the variant stood for: encoder or decoder self-attention
    positions: int | None = None  # the positions `effect` is over where not every token's (a classifier's: 1)
    reference_attention: str | None = None  # the learner's check: the reference model's attention module
    effect: Effect | None = None  # the variant in the layer's place; None: the learner's check, or it failed
    # intervene.head=all or a list: the heads edited one at a time, and each edit's effect in that order
    edited_heads: list[int] | None = None
    head_effects: list[Effect] | None = None

    @property
    def layer_name(self) -> str:
        """The layer as `layer=` names it: 3, encoder.1, decoder.0."""
        return f"{self.stack}.{self.layer}" if self.stack else str(self.layer)


@dataclass(frozen=True)
class Side:
    """One module of the pair as the run captured it: the variant, or the reference it is compared with."""

    name: str = ""  # the variant's name; the reference's label (a variant name, or a layer's own attention)
    stages: dict[str, np.ndarray | None] = field(default_factory=dict)  # in the module's own rank
    shapes: dict[str, list[int]] = field(default_factory=dict)  # in the module's own rank
    canonical_shapes: dict[str, list[int]] = field(default_factory=dict)  # each stage in the view of stages.AXES
    # the variant's: against the reference, with profile=true's timings and a model's effects;
    # the reference's: against itself. None: a value the run could not compute, or an older format did not have
    diagnostics: dict[str, float | None] = field(default_factory=dict)

    @property
    def num_heads(self) -> int:
        weights = self.canonical("weights")
        return int(weights.shape[1]) if weights is not None else 1

    def canonical(self, stage: str) -> np.ndarray | None:
        """A stage in the canonical view of `attnlab.capture.stages.AXES`, (batch, heads, ...):
        the module's own values reshaped (a 2-D module's weights (6, 6) as (1, 1, 6, 6))."""
        values = self.stages.get(stage)
        if values is None:
            return None
        shape = self.canonical_shapes.get(stage)
        return values.reshape(shape if shape is not None else canonical_shape(stage, values.shape))

    def heads_view(self, stage: str, *, batch: int = 0) -> np.ndarray | None:
        """Batch item `batch` of a stage: (heads, tokens, ·) where it has several heads, else (tokens, ·)."""
        values = self.canonical(stage)
        if values is None or values.ndim < 3:
            return values
        item: np.ndarray = values[min(batch, values.shape[0] - 1)]
        return item[0] if item.ndim == 3 and item.shape[0] == 1 else item

    def matrix(self, stage: str, *, batch: int = 0, head: int = 0) -> np.ndarray | None:
        """One (tokens x ·) matrix of a stage: batch item `batch`, head `head` where it has heads."""
        values = self.canonical(stage)
        if values is None:
            return None
        if values.ndim == 4:
            values = values[batch, min(head, values.shape[1] - 1)]
        elif values.ndim == 3:
            values = values[batch]
        return values


def _reference() -> Side:
    return Side("reference")


@dataclass(frozen=True)
class Record:
    """Built once, by attnlab.record.parts.record_of from what each step returned, and never changed:
    writing it (its `path`) or letting its stages go makes a new record. A field added here is
    written and read by attnlab.record.codec without naming it there."""

    variant: Side  # the module under test: `record.variant.name`, `record.variant.stages`
    seed: int
    config: dict[str, Any]
    n_tokens: int = 0
    d_in: int = 0
    d_out: int = 0
    status: str = "ok"  # "ok" | "failed"
    error: str | None = None
    labels: list[str] = field(default_factory=list)
    reference: Side = field(default_factory=_reference)  # the module it is compared against
    origin: str = ""  # a variant of yours: its plugin file, entry point, notebook class or <notebook>
    expected_shapes: dict[str, list[int]] = field(default_factory=dict)  # predicted: the reference's
    missing_stages: list[str] = field(default_factory=list)  # not found in the variant: not checked
    reconstructed_stages: list[str] = field(default_factory=list)  # computed by attnlab from a kernel's inputs
    output_is_context: bool = False  # the module returned its context: output is an alias of context
    returned: str = ""  # what forward returned, e.g. "tuple(Tensor (2, 8, 64), Tensor (2, 4, 8, 8))"
    output_element: str | None = None  # which element of it is the output, e.g. "[0]"; None: the value itself
    returned_weights: str | None = None  # attention weights returned beside the output, against the captured ones
    head_diagnostics: dict[str, list[float | None]] = field(default_factory=dict)  # {name: one value per head}
    first_divergent_stage: str | None = None
    findings: list[Finding] = field(default_factory=list)
    not_checked: list[str] = field(default_factory=list)  # checks that could not run, each in one sentence
    notes: list[str] = field(default_factory=list)  # what the run did other than asked (its own token count), and why
    predictions: list[Prediction] = field(default_factory=list)
    weights_loaded: dict[str, str] = field(default_factory=dict)
    device: str = "cpu"  # where both modules ran
    dtype: str = "float32"  # the variant's (the reference's is config["reference_dtype"])
    profile: dict[str, float | None] = field(default_factory=dict)  # profile=true: compute.profile.profile_pair's
    model: ModelInfo | None = None  # with model=: the model, the layer, the effect on its output
    path: Path | None = field(default=None, metadata={"written": False})  # where it was read from or written to
    scratch: Any = field(default=None, metadata={"written": False})  # spilled stages' folder, removed with the record

    @property
    def ok(self) -> bool:
        return self.status == "ok"


def canonical_shape(stage: str, shape: tuple[int, ...]) -> tuple[int, ...]:
    """A stage's shape in the module's own rank as the canonical view's: a 2-D module gains a
    batch and a heads axis, a 3-D per-head stage (batch, tokens, ·) a heads axis."""
    rank = len(AXES.get(stage, shape))
    if len(shape) >= rank:
        return tuple(shape)
    if rank == 4 and len(shape) == 3:
        return (shape[0], 1, *shape[1:])
    return (1,) * (rank - len(shape)) + tuple(shape)
