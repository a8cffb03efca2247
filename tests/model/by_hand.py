"""Edits written by hand as hooks in a Hugging Face GPT-2's own forward, and their effect on its
predictions: what the tests of interventions and batches compare attnlab's records with."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from tests.model.conftest import N_EMBD, N_HEAD, TEXT

OTHER = TEXT.replace("Every effort", "Each effort")  # as many GPT-2 tokens
HS = N_EMBD // N_HEAD


def effect_by_hand(model, ids: torch.Tensor, layer: int, edit) -> dict[str, float]:
    """KL(model || edited) and the losses, `edit(context)` a hand-written pre-hook on c_proj's input (1, T, d)."""
    proj = model.transformer.h[layer].attn.c_proj
    with torch.no_grad():
        base = model(input_ids=ids, use_cache=False).logits[0]  # (T, vocab)
        hook = proj.register_forward_pre_hook(lambda _m, args: (edit(args[0]),))
        changed = model(input_ids=ids, use_cache=False).logits[0]  # (T, vocab)
        hook.remove()
    p, q = F.log_softmax(base.double(), -1), F.log_softmax(changed.double(), -1)  # (T, vocab)
    return {"kl_mean": float(F.kl_div(q, p, log_target=True, reduction="none").sum(-1).mean()),
            "loss_changed": float(F.cross_entropy(changed[:-1], ids[0, 1:]))}


def eager_model(folder):
    from transformers import GPT2LMHeadModel

    from attnlab.inputs.text import gpt2_encoding

    model = GPT2LMHeadModel.from_pretrained(folder, attn_implementation="eager").eval()
    return model, torch.tensor([gpt2_encoding().encode(TEXT)]), torch.tensor([gpt2_encoding().encode(OTHER)])


def zero_head(head: int, mode: str = "zero"):
    """An edit of c_proj's input (1, T, d): head `head`'s columns set to zero or to their mean over the positions."""
    def ablate(context):  # (1, T, d)
        context = context.clone()
        columns = context[..., head * HS:(head + 1) * HS]  # (1, T, hs)
        context[..., head * HS:(head + 1) * HS] = 0.0 if mode == "zero" else columns.mean(dim=1, keepdim=True)
        return context
    return ablate


def check_effect(effect, hand: dict[str, float], record) -> None:
    """`effect` (a record's, or one batch item's) equals the hand-written edit's to 1e-6 relative, and shows."""
    assert record.status == "ok", record.error
    assert effect.kl_mean == pytest.approx(hand["kl_mean"], rel=1e-6)
    assert effect.loss_changed == pytest.approx(hand["loss_changed"], rel=1e-6)
    assert effect.kl_mean > 1e-3
