"""Keys and values compared at key/value-head granularity, whether or not a side repeated them.

Hugging Face's eager path captures keys after `repeat_kv` (one copy per query head), its sdpa
path before (one per key/value head, `enable_gqa`); the source's GQA repeats with
`repeat_interleave` before the score product. The same grouping must compare equal: where one
side's keys and values have more heads than the other's and are that side's heads repeated, they
are compared as the unrepeated heads.

Repeated heads come in two orders, both a valid grouping: "grouped", each kv head repeated in a
row so query head h reads kv head h // group (Llama's repeat_kv, repeat_interleave), and "tiled",
the kv heads repeated as a whole so query head h reads kv head h % kv_heads (x-transformers'
`repeat`, torch's `.repeat`).
"""

from __future__ import annotations

from dataclasses import replace

import torch

from attnlab.capture.recorder import Capture

KV_STAGES = ("keys", "values")
ORDERS = ("grouped", "tiled")


def kv_head_of(h: int, heads: int, kv_heads: int, order: str) -> int:
    """The key/value head query head h reads under `order`."""
    return h % kv_heads if order == "tiled" else h // max(1, heads // kv_heads)


def repetition(keys: torch.Tensor, values: torch.Tensor, kv_heads: int) -> str | None:
    """The order in which keys and values (b, heads, tokens, head_dim) repeat `kv_heads` heads, if
    they do: "grouped" (checked first: with one kv head both orders are the same) or "tiled"."""
    heads = keys.shape[1]
    if kv_heads >= heads or heads % kv_heads or values.shape[1] != heads:
        return None
    return next((order for order in ORDERS if all(
        torch.equal(t[:, i], t[:, _first_reader(i, heads, kv_heads, order)]) for t in (keys, values)
        for i in range(heads))), None)


def _first_reader(h: int, heads: int, kv_heads: int, order: str) -> int:
    """The first query head that reads the same kv head as query head h: where its copy is kept."""
    kv = kv_head_of(h, heads, kv_heads, order)
    return kv if order == "tiled" else kv * (heads // kv_heads)


def unrepeated(t: torch.Tensor, kv_heads: int, order: str = "grouped") -> torch.Tensor:
    """The first copy of each repeated head: (b, kv_heads, tokens, head_dim), a view."""
    return t[:, :kv_heads] if order == "tiled" else t[:, :: t.shape[1] // kv_heads]


def kv_grouping(captured: Capture) -> tuple[int, str]:
    """The key/value heads a capture has and the order its query heads read them in: its keys'
    heads, each run of repeated heads counted once."""
    keys, values = captured.stages["keys"], captured.stages["values"]
    heads = keys.shape[1]
    for count in range(1, heads):
        order = repetition(keys, values, count)
        if order is not None:
            return count, order
    return heads, "grouped"


def align_kv_heads(variant: Capture, reference: Capture, shared: bool = False) -> tuple[Capture, Capture]:
    """Both sides with their keys and values at their own key/value heads, as new captures (the
    given ones are left as captured); with `shared` weights, a variant with fewer key/value heads
    than the reference is compared with the reference heads its kv heads were loaded from (kv head
    g from head g * group, see modules.layouts, whatever order the variant reads them in), so that
    RoPE or QK-norm on the keys is still seen under GQA."""
    if any(s not in c.stages or c.stages[s].dim() != 4 for c in (variant, reference) for s in KV_STAGES):
        return variant, reference
    variant, reference = _at_own_kv_heads(variant), _at_own_kv_heads(reference)
    mine, theirs = variant.stages["keys"].shape[1], reference.stages["keys"].shape[1]
    if shared and mine < theirs and theirs % mine == 0:
        reference = _unrepeated_capture(reference, mine, "grouped")
    return variant, reference


def _at_own_kv_heads(captured: Capture) -> Capture:
    """A copy of `captured` that knows its key/value heads and their order, its keys and values at them."""
    count, order = kv_grouping(captured)
    own = replace(captured, kv_heads=count, kv_order=order)
    return _unrepeated_capture(own, count, order) if count < captured.stages["keys"].shape[1] else own


def _unrepeated_capture(captured: Capture, count: int, order: str) -> Capture:
    """A copy with keys and values at `count` heads; their shapes are then the (batch, kv heads, tokens,
    head_dim) they are compared in, which the module's own rank (the heads repeated) no longer describes."""
    kv = {stage: unrepeated(captured.stages[stage], count, order) for stage in KV_STAGES}
    return replace(captured, stages={**captured.stages, **kv},
                   native_shapes={**captured.native_shapes, **{stage: tuple(t.shape) for stage, t in kv.items()}})
