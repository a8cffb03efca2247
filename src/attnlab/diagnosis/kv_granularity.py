"""Keys and values compared at key/value-head granularity, whether or not a side repeated them.

Hugging Face's eager path captures keys after `repeat_kv` (one copy per query head), its sdpa
path before (one per key/value head, `enable_gqa`); the source's GQA repeats with
`repeat_interleave` before the score product. The same grouping must compare equal: where one
side's keys and values have more heads than the other's and are that side's heads each repeated
in a row, they are compared as the unrepeated heads.
"""

from __future__ import annotations

import torch

from attnlab.capture.recorder import Capture

KV_STAGES = ("keys", "values")


def repeated_group(keys: torch.Tensor, values: torch.Tensor, kv_heads: int) -> bool:
    """Whether keys and values (b, heads, tokens, head_dim) are `kv_heads` heads, each repeated in a row."""
    heads = keys.shape[1]
    if kv_heads >= heads or heads % kv_heads or values.shape[1] != heads:
        return False
    group = heads // kv_heads
    return all(torch.equal(t[:, i], t[:, i - i % group]) for t in (keys, values) for i in range(heads))


def unrepeated(t: torch.Tensor, kv_heads: int) -> torch.Tensor:
    """The first head of each group of repeated heads: (b, kv_heads, tokens, head_dim), a view."""
    return t[:, :: t.shape[1] // kv_heads]


def align_kv_heads(variant: Capture, reference: Capture) -> None:
    """Bring the side with repeated key/value heads to the other side's head count, in place."""
    if any(s not in c.stages for c in (variant, reference) for s in KV_STAGES):
        return
    mine, theirs = variant.stages["keys"].shape[1], reference.stages["keys"].shape[1]
    if mine == theirs:
        return
    more, fewer = (variant, theirs) if mine > theirs else (reference, mine)
    if repeated_group(more.stages["keys"], more.stages["values"], fewer):
        for stage in KV_STAGES:
            more.stages[stage] = unrepeated(more.stages[stage], fewer)
