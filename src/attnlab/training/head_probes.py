"""Per-head measures at every evaluation, from the causal evaluation set: each layer's and head's
attention entropy (of the uniform's over the causal prefix), largest weight, and induction score
(Olsson et al. 2022: on a random segment followed by its repeat, the mean attention from a token of
the repeat to the token right after its earlier occurrence). The first probe item's weights are kept
for the heatmaps (never written to training.json), and "heads formed" is the first evaluation at
which some head's induction score exceeds INDUCTION_THRESHOLD."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from attnlab.capture.recorder import capture
from attnlab.training.gpt import GPTModel
from attnlab.training.measures import attention_inputs, saturation
from attnlab.training.tasks import Batch, Task
from attnlab.training.tasks.induction import Induction

INDUCTION_THRESHOLD = 0.4  # a head above it attends mostly to the follower of the earlier occurrence
HEAD_WEIGHTS = "head_weights"  # the side's {step: {layer: (H, T, T)}} the heatmaps draw; not in training.json
PROBE_SEED = 2**31 - 3  # the repeated segments of a task whose evaluation set has none
PROBE_ITEMS = 8  # sequences of the evaluation set the heads are measured on (capture costs per element)


def segment_length(context_length: int) -> int:
    """The repeated segment's length: the induction task's (its repeat covers the rest)."""
    return (context_length + 2) // 2


def induction_score(weights: torch.Tensor, segment: int) -> list[float]:
    """Per head, the mean weight from each query of the repeat (positions segment..T-1) to the key
    one after its earlier occurrence (query - segment + 1). weights: (B, H, T, T)."""
    T = weights.shape[-1]
    queries = torch.arange(segment, T)  # (n,) the repeat's positions
    keys = queries - segment + 1  # (n,) the followers of their earlier occurrences
    return weights.float()[:, :, queries, keys].mean(dim=(0, 2)).tolist()  # (H,)


def repeated_segments(vocab: int, context_length: int, size: int) -> torch.Tensor:
    """(size, context_length) random tokens: a segment, then its repeat, the same for every seed."""
    generator = torch.Generator().manual_seed(PROBE_SEED)
    segment = torch.randint(0, vocab, (size, segment_length(context_length)), generator=generator)  # (B, L)
    return torch.cat([segment, segment], dim=1)[:, :context_length]  # (B, T)


class HeadProbes:
    """Measures a model's heads at each evaluation and keeps what it measured."""

    def __init__(self, task: Task, evaluation: Batch, recorded: dict[str, Any] | None = None) -> None:
        self.inputs = evaluation.inputs[:PROBE_ITEMS]  # (b, T)
        T = self.inputs.shape[1]
        # the induction task's evaluation set is repeated segments already; other tasks' get their own
        self.repeats = None if isinstance(task, Induction) else repeated_segments(
            task.vocab, T, len(self.inputs)).to(self.inputs.device)  # (b, T)
        self.segment = segment_length(T)
        recorded = recorded or {}  # a resumed side's measures so far (recorded(), from its checkpoint)
        self.steps: list[dict[str, float]] = list(recorded.get("heads", []))
        self.weights: dict[str, dict[int, np.ndarray]] = {
            step: {int(layer): np.asarray(w) for layer, w in layers.items()}
            for step, layers in recorded.get(HEAD_WEIGHTS, {}).items()}

    def at(self, model: GPTModel, step: int) -> None:
        was_training = model.training
        model.eval()
        measured: dict[str, float] = {"step": step}
        first_item: dict[int, np.ndarray] = {}
        with torch.no_grad():
            main = self._weights(model, self.inputs)
            repeats = main if self.repeats is None else self._weights(model, self.repeats)
        for layer, weights in main.items():
            first_item[layer] = weights[0].half().cpu().numpy()  # (H, T, T)
            largest, entropy = saturation(weights)
            for head, (peak, spread) in enumerate(zip(largest, entropy)):
                measured[f"layer{layer}/head{head}/max_weight"] = peak
                measured[f"layer{layer}/head{head}/entropy"] = spread
        for layer, weights in repeats.items():
            for head, score in enumerate(induction_score(weights, self.segment)):
                measured[f"layer{layer}/head{head}/induction"] = score
        scores = [v for k, v in measured.items() if k.endswith("/induction")]
        if scores:
            measured["induction_max"] = max(scores)
        model.train(was_training)
        self.steps.append(measured)
        self.weights[str(step)] = first_item

    @staticmethod
    def _weights(model: GPTModel, inputs: torch.Tensor) -> dict[int, torch.Tensor]:
        """{layer: its captured weights (B, H, T, T)}; a layer whose weights cannot be read, or are not
        one row per query over the keys, is left out (its heads are not measured)."""
        T = inputs.shape[1]
        found = {}
        for layer, (attention, x) in enumerate(zip(model.attention_layers(), attention_inputs(model, inputs))):
            weights = capture(attention, x).stages.get("weights")
            if weights is not None and weights.dim() == 4 and tuple(weights.shape[-2:]) == (T, T):
                found[layer] = weights
        return found

    def recorded(self) -> dict[str, Any]:
        """What the side keeps: `heads` (one entry per evaluation, in training.json) and the heatmaps' arrays."""
        return {"heads": self.steps, HEAD_WEIGHTS: self.weights}


def induction_formed(heads: list[dict[str, float]]) -> float | None:
    """The first evaluation step at which some head's induction score exceeds INDUCTION_THRESHOLD."""
    return next((float(point["step"]) for point in heads if point.get("induction_max", 0.0) > INDUCTION_THRESHOLD), None)


def formation_sentence(variant: str, summaries: list[dict[str, dict[str, float]]], steps: int) -> str | None:
    """When each side's induction heads formed, seed by seed (None where the reference's were not measured)."""
    if not all("induction_formed" in s["reference"] for s in summaries):
        return None

    def when(side: str) -> str:
        if not all("induction_formed" in s[side] for s in summaries):
            return "not measured (its attention weights are not one row per query over the keys)"
        formed = [s[side]["steps_to_induction"] if s[side]["induction_formed"] else None for s in summaries]
        if not any(v is not None for v in formed):
            return f"never formed in {steps} steps"
        listed = ", ".join("never" if v is None else f"{v:.0f}" for v in formed)
        return f"formed at step{'s' * (len(formed) > 1)} {listed}"

    return (f"induction heads (some head's induction score above {INDUCTION_THRESHOLD}): the reference's "
            f"{when('reference')}; {variant}'s {when('variant')}")
