"""The capture's result: every head's stages put together in the canonical view of
`attnlab.capture.stages.AXES`, each with its shape in the module's own rank.

Several independent score products (the source's MultiHeadAttentionWrapper runs one
CausalAttention per head) are stacked along the heads axis."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch

from attnlab.capture import placement
from attnlab.capture.provenance import Head, Recording
from attnlab.capture.stages import STAGES, canonical, canonical_tokens
from attnlab.modules.built import Returned


@dataclass
class Capture:
    stages: dict[str, torch.Tensor]  # canonical view (stages.AXES); "inputs" and "output" always present
    native_shapes: dict[str, tuple[int, ...]]  # each stage's shape in the module's own rank
    sources: dict[str, str | None]  # "queries"/"keys"/"values" -> projection role of the parameter that made it
    softmax_dim: int | None  # the softmax's dim in the module's own rank of the weights, non-negative
    missing: list[str] = field(default_factory=list)  # stages that could not be found (never guessed)
    prescale: dict[str, float] = field(default_factory=dict)  # factors on queries / keys before the product
    reconstructed: list[str] = field(default_factory=list)  # stages attnlab computed from a kernel's inputs
    score_roles: tuple[str | None, str | None] = (None, None)  # roles of the score product's row, column operand
    output_is_context: bool = False  # the module returned its context itself: output is an alias
    softmax_axis: int | None = None  # the softmax's dim in the canonical (batch, heads, query, key) view
    out_inputs: list[torch.Tensor] = field(default_factory=list)  # what each output-projection product was given
    returned: str = ""  # what forward returned, for an error: its shape, or its type
    call: Returned | None = None  # what forward returned as a whole, the element used, weights returned beside it
    declared_scale: tuple[float, str] | None = None  # a factor on the scores its config declares, and where
    declared_clip: tuple[float, str] | None = None  # the bound its config clamps q, k and v to, and where
    kv_heads: int | None = None  # its own key/value heads, once the diagnosis views keys at that granularity
    kv_order: str = "grouped"  # which kv head query head h reads: "grouped" h // group, "tiled" h % kv_heads
    unobservable: dict[str, str] = field(default_factory=dict)  # stages not in the canonical view, and why
    sinks: torch.Tensor | None = None  # (heads, columns) learned logits joined to each row's softmax, kept apart
    output_gate: str | None = None  # the projection whose own columns gate the context before the output projection
    lengths: tuple[int, ...] | None = None  # a padded batch: each item's tokens, its pads never counted in statistics
    no_softmax: str | None = None  # the library's class it comes from computes no softmax (an approximation): its name
    score_terms: float | None = None  # the module adds its own term to its scores: their factor, read from its ops
    key_selection: tuple[int, int] | None = None  # a sparse indexer keeps each query's top k of n candidate keys: (k, n)
    selected_keys: torch.Tensor | None = None  # (batch, 1, query, key) the keys it kept, where its candidates are the keys

    # What "scores" holds: always the product of the UNscaled queries and keys, so
    # `divergence_scores` compares like with like and `scale_observed` is the EFFECTIVE scale.
    # With a pre-factor the module never computed that product: capture divides the one it did
    # compute by the recorded factors (one elementwise pass), the only extra score-sized tensor
    # besides the copy made before an in-place op on the scores.


def assemble(rec: Recording, x: torch.Tensor, returned: Returned) -> Capture:
    """The Capture of one recorded forward on `x` that returned `returned`."""
    selectors, rec.heads = _selectors(rec.heads)
    found, native, unobservable = _head_stages(rec.heads, x.shape[0] if x.dim() == 3 else 1)
    found = {stage: rec.memory.kept(tensor) for stage, tensor in found.items()}
    for stage, tensor in rec.explicit.items():
        view = canonical(tensor, rec.batch) if stage not in ("inputs", "output") else canonical_tokens(tensor)
        if view is not None:
            found[stage], native[stage] = view, tuple(tensor.shape)
    inputs = canonical_tokens(x)
    if inputs is None:  # the inputs' own check allows only these ranks
        raise ValueError(f"inputs of shape {tuple(x.shape)}: expected (tokens, width) or (batch, tokens, width)")
    found["inputs"], native["inputs"] = inputs, tuple(x.shape)
    out = returned.output
    output_is_context = False
    if isinstance(out, torch.Tensor):
        output = canonical_tokens(out)
        if output is not None and output.shape[-2] == found["inputs"].shape[-2]:  # one row per token
            found["output"], native["output"] = output, tuple(out.shape)
        output_is_context = len(rec.heads) == 1 and rec.heads[0].output is out
    first = rec.heads[0] if rec.heads else Head()
    prescale = {}
    for head in rec.heads:
        prescale.update(head.prescale)
    sources = {s: (first.sources.get(s) if s in found else None) for s in ("queries", "keys", "values")}
    reconstructed = sorted(set().union(*(h.reconstructed for h in rec.heads)) & set(found)) if rec.heads else []
    missing = [s for s in STAGES if s not in found and s != "weights_applied"]
    if any("weights_applied" in h.unseen for h in rec.heads):
        missing.append("weights_applied")
    tokens = found["inputs"].shape[-2]
    unobservable = {**placement.unplaced(found, found["inputs"].shape[0], tokens), **unobservable}
    return Capture(found, native, sources, first.softmax_dim, missing, prescale, reconstructed,
                   first.roles, output_is_context, first.softmax_axis, rec.out_inputs, returned.description, returned,
                   unobservable={s: unobservable[s] for s in STAGES if s in unobservable and s in found},
                   sinks=_sinks(rec.heads, rec.batch), output_gate=rec.gate, score_terms=_score_terms(rec.heads),
                   key_selection=selectors[0].selects if selectors else None,
                   selected_keys=_selected_keys(selectors, rec.batch, tokens))


def _selectors(heads: list[Head]) -> tuple[list[Head], list[Head]]:
    """The score products whose top-k was taken and that reach no softmax (a sparse indexer's,
    attnlab.capture.selection), and the module's heads: the others. Where every product is a
    selector, none is set apart (nothing would be left to compare)."""
    selectors = [h for h in heads if h.selects is not None and h.softmax_dim is None and "scaled_scores" not in h.found]
    rest = [h for h in heads if not any(h is s for s in selectors)]
    return (selectors, rest) if rest else ([], heads)


def _selected_keys(selectors: list[Head], batch: int, tokens: int) -> torch.Tensor | None:
    """(batch, 1, query, key) the keys the first selector kept, where its candidates are the tokens
    themselves (not pools of them)."""
    kept = selectors[0].selected if selectors else None
    view = canonical(kept, batch) if kept is not None else None
    if view is None or view.shape[0] != batch or view.shape[-2:] != (tokens, tokens):
        return None
    return view.any(dim=1, keepdim=True)  # one selection per query, whatever axes it was computed over


def _score_terms(heads: list[Head]) -> float | None:
    """The one factor every head's softmax input is of its scores, when a head adds a term the module
    computes itself (its relative-position logits): then the scale is read from the ops, since a
    fit of the softmax input on the scores would take the term for a scale. None: no such term, or
    the factor is not known."""
    factors = {h.logit_factor for h in heads}
    if not any(h.terms for h in heads) or len(factors) != 1:
        return None
    factor = factors.pop()
    return factor if math.isfinite(factor) else None


def _sinks(heads: list[Head], batch: int) -> torch.Tensor | None:
    """Each head's sink logits (heads, columns), when its softmax had them: a copy, the module's are parameters."""
    views = [canonical(h.sinks[0], batch) for h in heads if h.sinks is not None]
    placed = [v for v in views if v is not None]
    if not placed or len(placed) != len(views):
        return None
    return torch.cat([v[0, :, 0] for v in placed]).detach().clone()


def _head_stages(heads: list[Head], batch: int) -> tuple[dict[str, torch.Tensor], dict[str, tuple[int, ...]],
                                                        dict[str, str]]:
    """Each stage every head found, in the canonical view, heads stacked; its native shape; and the
    stages that are not the module's heads, and why: those of score products whose maps are combined
    before the values (sub-heads; those multiplied with the values make the values and the context),
    and the values and context of weights multiplied with several values tensors."""
    found: dict[str, torch.Tensor] = {}
    native: dict[str, tuple[int, ...]] = {}
    for head in heads:
        _raw_scores(head)
    applied = [h for h in heads if "context" in h.found]
    combined = 0 < len(applied) < len(heads)
    for stage in STAGES[1:-1]:
        making = applied if combined and stage in _APPLIED else heads
        tensors = [t for h in making if (t := h.found.get(stage)) is not None]
        if not tensors or len(tensors) != len(making):
            continue
        items = [h.item for h in making]
        numbered = [i for i in items if i is not None]
        per_item = batch > 1 and len(numbered) == len(items) and sorted(set(numbered)) == list(range(batch))
        placed = [canonical(t, 1 if per_item else batch) for t in tensors]
        views = [c for c in placed if c is not None]
        if len(views) != len(placed) or len({c.shape[:1] + c.shape[2:] for c in views}) != 1:
            continue
        if per_item:  # a loop over the batch: each item's heads side by side, the items one after the other
            by_item = [torch.cat([v for v, i in zip(views, items) if i == item], dim=1) for item in range(batch)]
            if len({v.shape for v in by_item}) != 1:
                continue
            found[stage] = torch.cat(by_item, dim=0)
        else:
            found[stage] = views[0] if len(views) == 1 else torch.cat(views, dim=1)
        native[stage] = tuple(tensors[0].shape) if len(tensors) == 1 else tuple(found[stage].shape)
    why = placement.sub_heads(len(applied), len(heads)) if combined else ""
    unplaced = {stage: why for stage in found if combined and stage not in _APPLIED}
    unplaced.update({stage: placement.TOKEN_MIXED for stage in found if any(stage in h.mixed for h in heads)})
    split = max((h.value_products for h in heads), default=0)
    if split > 1:
        unplaced.update({stage: placement.split_values(split) for stage in _APPLIED if stage in found})
    return found, native, unplaced


_APPLIED = ("values", "weights_applied", "context")  # what a product with the values makes


def _raw_scores(head: Head) -> None:
    """Make "scores" the product of the unscaled queries and keys (see `Capture`)."""
    seen = head.found.get("scores")
    if seen is None or not head.prescale or "scores" in head.reconstructed:
        return
    total = math.prod(head.prescale.values())
    if total != 0.0 and math.isfinite(total) and math.isfinite(max_abs_or_nan(seen)):
        head.found["scores"] = seen / total
        head.logit_factor *= total  # the softmax input over the unscaled scores
        return
    del head.found["scores"]  # a zero factor: gone, never guessed


def max_abs_or_nan(t: torch.Tensor) -> float:
    """max |t| in one pass without a temporary (inf/nan when the tensor holds one)."""
    if t.numel() == 0:
        return 0.0
    lo, hi = torch.aminmax(t)
    return abs(max(-float(lo), float(hi)))  # abs: max(-0.0, 0.0) is -0.0, which tables print as "-0"
