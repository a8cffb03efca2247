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


def kv_head_count(captured: Capture) -> int:
    """The key/value heads a capture has: its keys' heads, each run of repeated heads counted once."""
    keys, values = captured.stages["keys"], captured.stages["values"]
    heads = keys.shape[1]
    return next((g for g in range(1, heads) if repeated_group(keys, values, g)), heads)


def align_kv_heads(variant: Capture, reference: Capture, shared: bool = False) -> None:
    """Both sides' keys and values at their own key/value heads, in place; with `shared` weights,
    a variant with fewer key/value heads than the reference is compared with the reference heads
    its kv heads were loaded from (kv head g from head g * group, see modules.layouts), so that
    RoPE or QK-norm on the keys is still seen under GQA."""
    if any(s not in c.stages or c.stages[s].dim() != 4 for c in (variant, reference) for s in KV_STAGES):
        return
    for captured in (variant, reference):
        count = captured.kv_heads = kv_head_count(captured)
        if count < captured.stages["keys"].shape[1]:
            _unrepeat(captured, count)
    mine, theirs = variant.stages["keys"].shape[1], reference.stages["keys"].shape[1]
    if shared and mine < theirs and theirs % mine == 0:
        _unrepeat(reference, mine)


def _unrepeat(captured: Capture, count: int) -> None:
    """Keys and values at `count` heads; their shapes are then the (batch, kv heads, tokens, head_dim)
    they are compared in, which the module's own rank (the heads repeated) no longer describes."""
    for stage in KV_STAGES:
        captured.stages[stage] = unrepeated(captured.stages[stage], count)
        captured.native_shapes[stage] = tuple(captured.stages[stage].shape)
