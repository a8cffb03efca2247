"""Attention sinks: a learned logit per head joined to each row's softmax as one more column and
dropped after it (gpt-oss), so each row's weights on the keys sum to less than 1."""

from __future__ import annotations

import torch

from attnlab.diagnosis.context import Pair
from attnlab.diagnosis.finding_code import Code, finds
from attnlab.diagnosis.message_format import fmt
from attnlab.diagnosis.recognisers.recogniser import recogniser
from attnlab.record import Finding

ATTENTION_SINKS = Code(
    "attention_sinks", ("weights",), "info",
    "a learned logit per head joins each row's softmax as one more column, dropped after it (gpt-oss's sinks)",
    "attention sinks: a learned logit per head joins each row's softmax as one more column and is dropped after it "
    "({per_head}); the weights on the keys sum to 1 minus the sink's share (mean {share}), so the weights and context "
    "differ from the reference's from here on.",
    "attention sinks (gpt-oss): a learned logit per head joined to each row's softmax as one more column and dropped "
    "after it; the capture keeps that column apart (the weights stay (query, key)), the finding names each head's "
    "logit and the share of weight the sink takes",
    ("tests/diagnosis/test_declared_changes.py::test_attention_sinks_are_named_with_their_logits",), "deliberate")


@finds(ATTENTION_SINKS)
@recogniser
def attention_sinks(p: Pair) -> list[Finding]:
    sinks = p.v.sinks
    logits, weights = p.v.stages.get("scaled_scores"), p.v.stages.get("weights")
    if sinks is None or logits is None or weights is None or p.ref.sinks is not None or logits.shape != weights.shape:
        return []
    if sinks.shape[0] != logits.shape[1]:
        return []
    column = sinks.to(logits.dtype)[None, :, None, :].expand(*logits.shape[:-1], sinks.shape[-1])  # (b, nh, q, k)
    joined = torch.softmax(torch.cat([logits, column], dim=-1), dim=-1)[..., : logits.shape[-1]]  # (b, nh, q, key)
    if not bool((joined - weights).abs().max() <= p.tolerance("weights") + 1e-6):
        return []
    share = 1 - float(weights.sum(dim=-1).mean())
    per_head = ", ".join(f"head {h}: {fmt(float(v[0]))}" for h, v in enumerate(sinks))
    return [ATTENTION_SINKS("weights", per_head=per_head, share=share)]
