"""A fixed evaluation set, evaluated teacher-forced (one forward over whole sequences) and causally
(each prefix on its own, its last position read): a variant that sees future tokens looks good
teacher-forced and fails causally. The prefixes of one length are one forward; the causal
evaluation is the costly part of a run, so the model computes the last position's logits only."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from attnlab.training.gpt import GPTModel
from attnlab.training.tasks import Batch


def _scores(logits: torch.Tensor, targets: torch.Tensor) -> tuple[float, float]:
    """(mean cross-entropy, accuracy) of logits (N, vocab) against targets (N,)."""
    loss = F.cross_entropy(logits.float(), targets).item()
    return loss, (logits.argmax(dim=-1) == targets).float().mean().item()


@torch.no_grad()
def teacher_forced(model: nn.Module, batch: Batch) -> tuple[float, float]:
    logits = model(batch.inputs)  # (B, T, vocab)
    return _scores(logits[batch.scored], batch.targets[batch.scored])


@torch.no_grad()
def causal(model: GPTModel, batch: Batch) -> tuple[float, float]:
    """Every scored position predicted from its prefix alone, so no later token can reach it."""
    logits, targets = [], []
    for position in batch.scored.any(dim=0).nonzero().flatten().tolist():
        rows = batch.scored[:, position]  # (B,)
        prefix = batch.inputs[rows, :position + 1]  # (b, position + 1)
        logits.append(model.last_logits(prefix))  # (b, vocab)
        targets.append(batch.targets[rows, position])  # (b,)
    return _scores(torch.cat(logits), torch.cat(targets))


def evaluate(model: GPTModel, batch: Batch) -> dict[str, float]:
    was_training = model.training
    model.eval()
    tf_loss, tf_accuracy = teacher_forced(model, batch)
    causal_loss, causal_accuracy = causal(model, batch)
    model.train(was_training)
    return {"teacher_forced_loss": tf_loss, "teacher_forced_accuracy": tf_accuracy,
            "causal_loss": causal_loss, "causal_accuracy": causal_accuracy}
