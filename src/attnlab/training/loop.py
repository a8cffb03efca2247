"""The training loop: plain torch, AdamW with linear warm-up then cosine decay, gradient clipping.

Nothing but the step runs inside the loop; the loss stays on the device until the end (no sync per
step) and evaluations run between steps at the settings' cadence, through `at_step`. A `Saving`
gets the loop's whole state at the steps it asks for (attnlab.training.checkpoint) and hands it
back to resume.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, Protocol

import torch
import torch.nn.functional as F
from torch import nn

from attnlab.training.settings import TrainingConf
from attnlab.training.tasks import Task


def schedule(settings: TrainingConf) -> Callable[[int], float]:
    """The learning rate's factor at a step: linear warm-up, then cosine to zero at the last step."""
    warmup, steps = min(settings.warmup, settings.steps - 1), settings.steps

    def factor(step: int) -> float:
        if step < warmup:
            return (step + 1) / warmup
        return 0.5 * (1 + math.cos(math.pi * (step - warmup) / max(1, steps - warmup)))
    return factor


class Saving(Protocol):
    """Where the loop's state goes (`due` steps) and comes back from (`resume`: None, from step 1)."""

    resume: dict[str, Any] | None

    def due(self, step: int) -> bool: ...

    def save(self, state: dict[str, Any]) -> None: ...


def train(model: nn.Module, task: Task, settings: TrainingConf, seed: int, device: str = "cpu",
          at_step: Callable[[int], None] | None = None, saving: Saving | None = None) -> list[float]:
    """Train `model` for settings.steps on batches drawn from `seed`; returns the loss at each step.
    `at_step(step)` runs after the steps that are multiples of eval_every, and after the last; then
    `saving` gets the state at the steps it is due (the model's parameters are its caller's to keep)."""
    optimizer = torch.optim.AdamW(model.parameters(), lr=settings.lr, weight_decay=settings.weight_decay)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, schedule(settings))
    generator = torch.Generator().manual_seed(seed)
    losses: list[torch.Tensor] = []
    first = 1
    if saving is not None and saving.resume is not None:
        state = saving.resume
        optimizer.load_state_dict(state["optimizer"])
        scheduler.load_state_dict(state["scheduler"])
        generator.set_state(state["generator"])
        losses = [torch.tensor(loss, dtype=torch.float32) for loss in state["losses"]]  # float32's, exactly
        first = state["step"] + 1
    model.train()
    for step in range(first, settings.steps + 1):
        batch = task.batch(settings.batch, generator)
        inputs, targets, scored = (t.to(device) for t in (batch.inputs, batch.targets, batch.scored))
        logits = model(inputs)  # (B, T, vocab)
        loss = F.cross_entropy(logits[scored], targets[scored])
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), settings.clip)
        optimizer.step()
        scheduler.step()
        losses.append(loss.detach())
        if at_step is not None and (step % settings.eval_every == 0 or step == settings.steps):
            at_step(step)
        if saving is not None and saving.due(step):
            saving.save({"step": step, "optimizer": optimizer.state_dict(), "scheduler": scheduler.state_dict(),
                         "generator": generator.get_state(), "losses": torch.stack(losses).tolist()})
    return torch.stack(losses).tolist()
