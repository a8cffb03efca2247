"""What a change does to the model's output: next-token distributions compared position by position.

The logits are produced a chunk of positions at a time from the final hidden states and reduced at
once (a GPT-2 vocabulary at 1,024 tokens would be 200 MB per forward if kept whole).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

CHUNK = 128  # positions per logits chunk


def log_probs(head: nn.Module, hidden: Tensor, softcap: float | None = None) -> Tensor:
    logits = head(hidden).float()  # (chunk, vocab)
    if softcap:  # Gemma 2 caps its final logits; the model's own forward would
        logits = torch.tanh(logits / softcap) * softcap
    return F.log_softmax(logits, dim=-1)  # (chunk, vocab)


@torch.no_grad()
def output_effect(head: nn.Module, base: Tensor, changed: Tensor, ids: Tensor, *, softcap: float | None = None,
                  changed_head: nn.Module | None = None, chunk: int = CHUNK) -> dict[str, float]:
    """KL(model || changed) of the next-token distributions (mean and max over positions), the
    share of positions whose top-1 token agrees, the loss on the text (mean next-token cross
    entropy) without and with the change, how far the final hidden states moved, and how many
    positions' changed predictions are not finite (their KL is NaN).
    `base`, `changed`: (1, T, d); `ids`: (1, T). `changed_head`: another model's own output head
    (the learner's check compares two models), else `head` makes both."""
    base, changed, targets = base[0], changed[0], ids[0]  # (T, d), (T, d), (T,)
    n = base.shape[0]
    kl_sum, kl_max, agree, nll, nll_changed, non_finite = 0.0, 0.0, 0, 0.0, 0.0, 0
    for start in range(0, n, chunk):
        stop = min(start + chunk, n)
        p = log_probs(head, base[start:stop], softcap)  # (c, vocab)
        q = log_probs(changed_head or head, changed[start:stop], softcap)  # (c, vocab)
        kl = (p.exp() * (p - q)).sum(dim=-1)  # (c,)
        non_finite += int((~torch.isfinite(kl)).sum())  # a NaN or infinity in q makes its position's KL one
        kl_sum += float(kl.sum())
        kl_max = max(kl_max, float(kl.max()), key=lambda v: (math.isnan(v), v))  # a NaN stays
        agree += int((p.argmax(dim=-1) == q.argmax(dim=-1)).sum())
        scored = min(stop, n - 1) - start  # the last position has no next token in the text
        if scored > 0:
            following = targets[start + 1:start + 1 + scored]  # (scored,)
            rows = torch.arange(scored)
            nll -= float(p[rows, following].sum())
            nll_changed -= float(q[rows, following].sum())
    difference = (changed - base).float()  # (T, d)
    return {
        "kl_mean": kl_sum / n,
        "kl_max": kl_max,
        "top1_agreement": agree / n,
        "loss": nll / (n - 1) if n > 1 else math.nan,
        "loss_changed": nll_changed / (n - 1) if n > 1 else math.nan,
        "hidden_divergence": float(difference.abs().max()),
        "hidden_relative_divergence": float(difference.norm() / base.float().norm().clamp_min(1e-30)),
        "non_finite_positions": non_finite,  # positions whose changed prediction holds NaN or infinity
    }
