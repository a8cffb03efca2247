"""The diagnosis of sections 3.5-3.6: masks, head splits and merges, the output projection,
dropout, grouped keys and batch mixing, each located per head and per batch item.

A mixin of `attnlab.diagnosis.findings._Diagnosis` (it reads `self.v`, `self.ref`, `self.shared`,
`self.findings` and calls `self.add`, `self.compare`, `self.judged`). Every check compares with an
independent computation: the reference's own stages re-arranged the way the mistake arranges them
(a head split without the transpose, a merge without it), the reference's mask pattern, the
variant's own weights before and after dropout.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import replace

import torch

from attnlab.diagnosis.batch_mixing import BatchMixing
from attnlab.capture.recorder import Capture
from attnlab.diagnosis.diagnostics import max_abs, max_abs_diff, scale_observed, stage_tolerance
from attnlab.record import Finding
from attnlab.capture.stages import AXES

MASK_CODES = ("mask_missing", "mask_offset", "mask_fill_value", "mask_after_softmax")
_SPLIT_STAGES = ("queries", "keys", "values")
_DROPOUT_RTOL = 1e-3


def _fmt(x: float) -> str:
    return str(round(x, 4))


def _items(values: list[int]) -> str:
    return ", ".join(str(i) for i in values)


def heads_phrase(finding: Finding, num_heads: int) -> str:
    """How the terminal names the heads a finding holds for: "all heads", "head 2", "heads 0-3",
    "heads 0-1, 5". None (no heads axis, or a finding about splitting the heads) is all heads."""
    heads = sorted(set(finding.heads or []))
    if finding.heads is None or heads == list(range(num_heads)):
        return "all heads"
    runs: list[list[int]] = []
    for h in heads:
        if runs and h == runs[-1][-1] + 1:
            runs[-1].append(h)
        else:
            runs.append([h])
    parts = [str(r[0]) if len(r) == 1 else f"{r[0]}-{r[-1]}" for r in runs]
    return f"head {parts[0]}" if len(heads) == 1 else f"heads {', '.join(parts)}"


def _close(a: torch.Tensor, b: torch.Tensor, tol: float) -> bool:
    return a.shape == b.shape and max_abs_diff(a, b) <= tol


def _same_everywhere(values: torch.Tensor, pattern: torch.Tensor) -> bool:
    """Whether every (batch, head) matrix of `values` is -inf exactly where `pattern` is True, one
    matrix at a time (no stage-sized boolean temporaries)."""
    lead = itertools.product(*(range(n) for n in values.shape[:-2]))
    return all(torch.equal(torch.isneginf(values[index]), pattern) for index in lead)


def _triu_offset(pattern: torch.Tensor) -> int | None:
    """k when the (query, key) pattern is exactly torch.triu(ones, diagonal=k), else None."""
    n_q, n_k = pattern.shape
    firsts = torch.where(pattern.any(dim=-1), pattern.int().argmax(dim=-1), -1)  # first hidden key per row
    rows = (firsts > 0).nonzero()
    if len(rows):
        r = int(rows[0])
        k = int(firsts[r]) - r
    elif pattern.all():
        k = -(n_q - 1)
    else:
        return None
    return k if torch.equal(pattern, torch.ones(n_q, n_k, dtype=torch.bool).triu(k)) else None


class HeadChecks:
    """Checks for batched, masked, multi-head modules (see the module docstring)."""

    v: Capture
    ref: Capture
    shared: bool
    findings: list[Finding]
    train: bool
    mixing: BatchMixing | None
    ref_mask: torch.Tensor | None  # the reference's (query, key) mask, where it has one
    finite_fill: bool  # the variant holds finite values where the reference masks

    # -- heads ------------------------------------------------------------------------------------

    def head_split(self) -> None:
        """queries, keys or values equal to the reference's merged projection viewed straight into
        (b, num_heads, num_tokens, head_dim): the split without the transpose."""
        split = []
        for stage in _SPLIT_STAGES:
            if not self.compare(stage):
                continue
            mine, ref = self.v.stages[stage], self.ref.stages[stage]
            if mine.shape != ref.shape or min(ref.shape[1], ref.shape[2]) < 2 or not self.differs(stage):
                continue
            b, h, n, hd = ref.shape
            viewed = ref.transpose(1, 2).reshape(b, h, n, hd)  # (b, num_tokens, d_out) viewed as (b, num_heads, ...)
            if _close(mine, viewed, stage_tolerance(stage, self.ref)):
                split.append(stage)
        if not split:
            return
        names = " and ".join([", ".join(split[:-1]), split[-1]] if len(split) > 1 else split)
        self.add("head_split", split[0], f"{names} are split into heads with .view(b, num_heads, num_tokens, "
                 f"head_dim) directly, so each head holds rows of other tokens and each token's columns are "
                 f"spread over the heads (tokens and heads scrambled); split with .view(b, num_tokens, num_heads, "
                 f"head_dim), then .transpose(1, 2), as the source does.", heads=None)

    def kv_heads(self) -> None:
        """Keys and values shared by groups of query heads (GQA, MQA): deliberate, an info finding."""
        keys, queries, values = (self.v.stages.get(s) for s in ("keys", "queries", "values"))
        if keys is None or queries is None or values is None or queries.shape[1] < 2:
            return
        group = self._group(self.v)
        if group < 2 or group == self._group(self.ref):
            return  # said only where the two sides group differently
        heads = queries.shape[1]
        shared = heads // group
        kind = "multi-query attention: one key/value head for all" if shared == 1 else "grouped-query attention"
        self.add("kv_heads", "keys", f"keys and values have {shared} head{'s' if shared > 1 else ''} for {heads} "
                 f"query heads: each is shared by a group of {group} query heads ({kind}); deliberate, so the "
                 f"differences it causes after the keys are its consequences, not findings.", severity="info",
                 heads=list(range(heads)))

    def _group(self, captured: Capture) -> int:
        """How many query heads share one key/value head (1: none share)."""
        queries, keys, values = (captured.stages.get(s) for s in ("queries", "keys", "values"))
        if queries is None or keys is None or values is None:
            return 1
        heads, kv = queries.shape[1], captured.kv_heads or keys.shape[1]
        return heads // kv if kv < heads and heads % kv == 0 else self._repeated_group(keys, values)

    @staticmethod
    def _repeated_group(keys: torch.Tensor, values: torch.Tensor) -> int:
        """The largest g > 1 such that keys and values repeat each head g times in a row (repeat_interleave)."""
        heads = keys.shape[1]
        for g in range(heads, 1, -1):
            if heads % g:
                continue
            if all(torch.equal(t[:, i], t[:, i - i % g]) for t in (keys, values) for i in range(heads)):
                return g
        return 1

    # -- masks ------------------------------------------------------------------------------------

    def mask_shape(self) -> None:
        """The variant's mask against the reference's: missing, shifted, filled with a finite value,
        or applied to the weights after the softmax."""
        self.ref_mask, self.finite_fill = None, False
        if any(f.code == "window" for f in self.findings):
            return  # a sliding window is a deliberate mask, named by its recogniser
        mine, ref = self.v.stages.get("scaled_scores"), self.ref.stages.get("scaled_scores")
        if mine is None or ref is None or mine.shape[-2:] != ref.shape[-2:]:
            return
        if math.isfinite(max_abs(ref)):
            return  # no mask in the reference (no -inf at all): a deliberate one is the `masked` note
        pattern = torch.isneginf(ref[(0,) * (ref.dim() - 2)])  # (query, key) of the first batch item and head
        if not pattern.any() or not _same_everywhere(ref, pattern):
            return
        self.ref_mask = pattern
        if not math.isfinite(max_abs(mine)):
            if _same_everywhere(mine, pattern):
                return  # the reference's mask
            hidden = torch.isneginf(mine)
            if hidden.any():
                self._mask_offset(hidden, pattern)
                return
        self.finite_fill = True  # the variant's entries there are finite: no scale is read from them
        weights = self.v.stages.get("weights_applied", self.v.stages.get("weights"))  # zeroed as multiplied
        where = pattern.expand_as(mine)
        if weights is not None and weights.shape == mine.shape:
            kept = weights[where]
            tol = stage_tolerance("weights", self.ref)
            if kept.numel() and bool((kept == 0).all()):
                sums = weights.sum(dim=-1)
                if not bool(((sums - 1).abs() <= tol).all()):
                    self.add("mask_after_softmax", "weights", f"the weights of the keys after each query are 0 but "
                             f"the rows sum to {_fmt(float(sums.min()))}..{_fmt(float(sums.max()))}, not 1: the "
                             f"mask was applied after the softmax and the rows were not renormalised; mask "
                             f"attn_scores with -torch.inf before the softmax (or divide each row by its sum, "
                             f"section 3.5.1).")
                return
            if kept.numel() and float(kept.abs().max()) <= tol:
                return  # filled with a value so negative that the weights are 0: the same as -inf
        filled = mine[where]
        if filled.numel() and bool((filled == filled[0]).all()) and bool(torch.isfinite(filled[0])):
            self.add("mask_fill_value", "scaled_scores", f"the hidden scaled_scores (the keys after each query) "
                     f"hold {_fmt(float(filled[0]))}, a finite value, where the reference has -inf, so exp() "
                     f"gives future tokens weight; fill the mask with -torch.inf.")
            return
        self.add("mask_missing", "scaled_scores", "the reference hides the keys after each query (-inf above the "
                 "diagonal of scaled_scores) and the variant hides none, so each query attends to the tokens "
                 "after it; mask attn_scores with masked_fill_(mask_bool, -torch.inf) before the softmax.")

    def _mask_offset(self, hidden: torch.Tensor, pattern: torch.Tensor) -> None:
        mine = hidden[0, 0]
        if torch.equal(mine, pattern) or not torch.equal(hidden, mine.expand_as(hidden)):
            return
        k, ref_k = _triu_offset(mine), _triu_offset(pattern)
        if k is None or ref_k is None:
            kernel = ("scaled_scores" in self.v.reconstructed and
                      " (scaled_dot_product_attention reads a boolean mask's True as 'may attend': pass ~mask, "
                      "or is_causal=True)") or ""
            self.add("mask_offset", "scaled_scores", "the variant's mask hides other keys than the reference's "
                     "causal mask (scaled_scores -inf at other places); build it with torch.triu(torch.ones("
                     f"context_length, context_length), diagonal=1){kernel}.")
            return
        if k < ref_k:
            what = ("hides each token from itself as well as the tokens after it (the first query sees no key "
                    "at all, so its softmax is 0/0 = NaN)") if k == ref_k - 1 else "hides tokens before each query too"
        else:
            what = ("lets each query see the next token too" if k == ref_k + 1
                    else f"lets each query see {k - ref_k} tokens after it")
        self.add("mask_offset", "scaled_scores", f"the mask (the -inf in scaled_scores) is built with triu(..., "
                 f"diagonal={k}) where the reference uses diagonal={ref_k}: it {what}; use diagonal={ref_k}, so each "
                 f"query sees itself and the tokens before it.")

    def masked_scale(self) -> float | None:
        """The effective scale over the entries the reference does not hide (a finite fill is no scaling)."""
        if self.ref_mask is None or not self.finite_fill:
            return None
        scores, scaled = self.v.stages.get("scores"), self.v.stages.get("scaled_scores")
        if scores is None or scaled is None or scores.shape != scaled.shape:
            return None
        return scale_observed(scores, scaled.masked_fill(self.ref_mask, float("nan")))

    # -- dropout ----------------------------------------------------------------------------------

    def dropout(self) -> None:
        """weights_applied = weights with zeros, the rest scaled by one factor 1/(1-p): dropout."""
        applied, weights = self.v.stages.get("weights_applied"), self.v.stages.get("weights")
        if applied is None or weights is None or applied.shape != weights.shape:
            return
        kept = applied != 0
        dropped = ~kept & (weights != 0)
        if not dropped.any() or not kept.any():
            return
        ratio = applied[kept] / weights[kept]
        factor = float(ratio.mean())
        if not bool(((ratio - factor).abs() <= _DROPOUT_RTOL * factor).all()) or factor <= 1:
            return
        share = float(dropped.sum()) / float((weights != 0).sum())
        rate = 1 - 1 / factor
        if self.train:
            self.add("dropout", "weights_applied", f"dropout is active (train=true): {_fmt(100 * share)}% of the "
                     f"attention weights as applied to the values (weights_applied) were zeroed and the rest "
                     f"multiplied by {_fmt(factor)} = 1/(1 - p), an "
                     f"estimated rate p = {_fmt(rate)}; the stages after it differ from the reference by chance.",
                     severity="info")
            return
        self.add("dropout_active", "weights_applied", f"the run is in eval mode, yet {_fmt(100 * share)}% of the "
                 f"attention weights as applied to the values (weights_applied) were zeroed and the rest "
                 f"multiplied by {_fmt(factor)} = 1/(1 - p) with "
                 f"p = {_fmt(rate)}: dropout is still on; use self.dropout = nn.Dropout(dropout), which .eval() "
                 f"turns off, or F.dropout(..., training=self.training) instead of training=True.")

    # -- after the context ------------------------------------------------------------------------

    def merge_and_projection(self) -> bool:
        """head_merge and out_proj; True when one of them was found.

        Read from the variant's own tensors (its context, what its output projection was given, its
        output) and the reference's structure (whether it projects, how often), so it holds with
        weights=native too; with shared weights it runs only where the output differs."""
        out, ref_out, ctx = (s.stages.get(n) for s, n in ((self.v, "output"), (self.ref, "output"), (self.v, "context")))
        # recognised changes only (RoPE, a window): the context moved on purpose, the merge is still judged
        deliberate = bool(self.findings) and all(f.severity == "info" for f in self.findings)
        if out is None or ref_out is None or ctx is None or ctx.dim() != 4 or (self.explained and not deliberate):
            return False
        if out.shape != ref_out.shape:
            return False  # a width: shape_projection at its projection, or wrong_output
        differs = self.shared and self.judged("output") and self.differs("output")
        if self.shared and not (differs and "context" in self.ref.stages and (deliberate or not self.differs("context"))):
            return False  # the output matches, or the context already differs: not about the lines after it
        b, h, n, hd = ctx.shape
        merged = ctx.transpose(1, 2).reshape(b, n, h * hd)  # (b, num_tokens, d_out), as the source merges
        unmerged = ctx.reshape(b, n, h * hd)  # the same without the transpose
        tol = stage_tolerance("context", self.v)
        scrambled = lambda t: h > 1 and n > 1 and _close(t, unmerged, tol) and not _close(t, merged, tol)  # noqa: E731
        ours, theirs = self.v.out_inputs, self.ref.out_inputs
        if theirs and not ours and (scrambled(out) or _close(out, merged, tol)):
            how = " (merged without the transpose, too)" if scrambled(out) else ""
            self.add("out_proj", "output", f"the output is the merged context_vec itself{how}: self.out_proj is "
                     f"never applied; the source ends with context_vec = self.out_proj(context_vec).")
        elif theirs and ours and (ours[0].dim() != 3 or ours[0].shape[-1] != h * hd):
            self.add("out_proj", "output", f"the output projection is applied per head, to a tensor of shape "
                     f"{tuple(ours[0].shape)} before the heads are merged, so it cannot combine them; merge the "
                     f"heads into (b, num_tokens, d_out) first, then apply self.out_proj = nn.Linear(d_out, d_out) once.")
        elif differs and theirs and len(ours) > len(theirs):
            self.add("out_proj", "output", f"the output projection is applied {len(ours)} times where the "
                     f"reference applies it {len(theirs)} time{'s' if len(theirs) > 1 else ''}; apply "
                     f"self.out_proj once, to the merged context_vec.")
        elif scrambled(ours[0] if ours else out):
            self.add("head_merge", "output", "the context is merged back with .reshape(b, num_tokens, d_out) (or "
                     ".view) without .transpose(1, 2) first, so each token's output row holds pieces of other "
                     "tokens from one head (heads and tokens mixed); use context_vec.transpose(1, 2).reshape(b, "
                     "num_tokens, d_out), as the source does.", heads=None)
        else:
            return False
        return True

    # -- batch items --------------------------------------------------------------------------------

    def batch_mixing(self) -> None:
        m = self.mixing
        if m is None or m.stage is None:
            return
        if any(f.stage == m.stage and f.severity == "error" for f in self.findings):
            return  # e.g. a softmax over the batch axis: named at that stage already
        items = f"item {m.items[0]}" if len(m.items) == 1 else f"items {_items(m.items)}"
        self.add("batch_mixing", m.stage, f"batch {items}, run alone, give{'s' if len(m.items) == 1 else ''} "
                 f"other {m.stage} than {'its slice' if len(m.items) == 1 else 'their slices'} of the batched run "
                 f"(by up to {_fmt(m.max_abs_diff)}): a batch item's result depends on the other items (a mean, "
                 f"sum or softmax over dim 0, the batch axis, or keys taken from another item); reduce over the "
                 f"tokens or features only.", batch=list(m.items), explains=False)

    # -- where each finding holds ----------------------------------------------------------------------

    def locate(self, finding: Finding) -> Finding:
        """Fill in the heads and batch items a finding holds for: where the stage differs from the
        reference (all of them when nothing was compared); None where the module has no such axis."""
        mine = self.v.stages.get(finding.stage)
        native = self.v.native_shapes.get(finding.stage)
        if mine is None or native is None:
            return finding
        per_head = "heads" in AXES[finding.stage] or "kv_heads" in AXES[finding.stage]
        has_batch = len(native) >= 3
        has_heads = per_head and (len(native) == 4 or mine.shape[1] > 1)
        splitting = finding.code in ("head_split", "head_merge")
        heads = finding.heads if finding.heads is not None or splitting else (
            list(range(mine.shape[1])) if has_heads else None)
        batch = finding.batch if finding.batch is not None else (list(range(mine.shape[0])) if has_batch else None)
        ref = self.ref.stages.get(finding.stage)
        explicit = finding.heads is not None or finding.batch is not None
        if not explicit and not splitting and self.shared and ref is not None and ref.shape == mine.shape:
            tol = stage_tolerance(finding.stage, self.ref)
            if per_head:
                grid = [[not max_abs_diff(mine[b, h], ref[b, h]) <= tol for h in range(mine.shape[1])]
                        for b in range(mine.shape[0])]
            else:
                grid = [[not max_abs_diff(mine[b], ref[b]) <= tol] for b in range(mine.shape[0])]
            rows = [b for b, row in enumerate(grid) if any(row)]
            if rows:
                batch = rows if has_batch else None
                if has_heads:
                    heads = [h for h in range(mine.shape[1]) if any(row[h] for row in grid)]
        return replace(finding, heads=heads if has_heads or finding.heads is not None else None,
                       batch=batch if has_batch else None)


__all__ = ["HeadChecks", "MASK_CODES", "heads_phrase"]
