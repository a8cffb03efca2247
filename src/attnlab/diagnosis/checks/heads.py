"""Heads (section 3.6): the split into heads, keys shared by groups of heads, and what the module
does after attn_weights @ values (merging the heads, the output projection, what it returns).

Every check compares with an independent computation: the reference's own stages re-arranged the
way the mistake arranges them (a split without the transpose, a merge without it)."""

from __future__ import annotations

import torch

from attnlab.capture.recorder import Capture
from attnlab.diagnosis.context import Context, Found, finding
from attnlab.diagnosis.diagnostics import max_abs_diff
from attnlab.diagnosis.kv_granularity import KV_STAGES, kv_grouping
from attnlab.record import Finding

_SPLIT_STAGES = ("queries", "keys", "values")


def _close(a: torch.Tensor, b: torch.Tensor, tol: float) -> bool:
    return a.shape == b.shape and max_abs_diff(a, b) <= tol


def head_split(ctx: Context, found: Found) -> list[Finding]:
    """queries, keys or values equal to the reference's merged projection viewed straight into
    (b, num_heads, num_tokens, head_dim): the split without the transpose."""
    split = []
    for stage in _SPLIT_STAGES:
        if not ctx.compare(stage, found):
            continue
        mine, ref = ctx.v.stages[stage], ctx.ref.stages[stage]
        if mine.shape != ref.shape or min(ref.shape[1], ref.shape[2]) < 2 or not ctx.differs(stage):
            continue
        b, h, n, hd = ref.shape
        viewed = ref.transpose(1, 2).reshape(b, h, n, hd)  # (b, num_tokens, d_out) viewed as (b, num_heads, ...)
        if _close(mine, viewed, ctx.tolerance(stage)):
            split.append(stage)
    if not split:
        return []
    names = " and ".join([", ".join(split[:-1]), split[-1]] if len(split) > 1 else split)
    return [finding("head_split", split[0], f"{names} are split into heads with .view(b, num_heads, num_tokens, "
                    f"head_dim) directly, so each head holds rows of other tokens and each token's columns are "
                    f"spread over the heads (tokens and heads scrambled); split with .view(b, num_tokens, num_heads, "
                    f"head_dim), then .transpose(1, 2), as the source does.")]


def kv_heads(ctx: Context, found: Found) -> list[Finding]:
    """Keys and values shared by groups of query heads (GQA, MQA), in either order: deliberate, an
    info finding where the two sides share them differently and the shared keys and values are the
    reference's (else the grouping explains nothing: key_index or value_path says what is wrong)."""
    queries = ctx.v.stages.get("queries")
    group, order = _grouping(ctx.v)
    theirs = _grouping(ctx.ref)
    if queries is None or queries.shape[1] < 2 or group < 2 or (group, order) == theirs:
        return []  # said only where the two sides group differently
    if not _kv_follow_the_reference(ctx, found):
        return []
    heads = queries.shape[1]
    shared = heads // group
    kind = "multi-query attention: one key/value head for all" if shared == 1 else "grouped-query attention"
    return [finding("kv_heads", "keys", f"keys and values have {shared} head{'s' if shared > 1 else ''} for {heads} "
                    f"query heads: each is shared by a group of {group} query heads ({kind})"
                    f"{_order(heads, (group, order), theirs)}; deliberate, so the differences it causes after the "
                    f"keys are its consequences, not findings.", heads=list(range(heads)))]


def _order(heads: int, mine: tuple[int, str], theirs: tuple[int, str]) -> str:
    """Which kv head query head h reads, said where there are several kv heads to read in two orders;
    the reference's too where it groups in the other order."""
    (group, order), (their_group, their_order) = mine, theirs
    if heads // group < 2:
        return ""
    said = f", {order}: query head h reads key/value head {_rule(heads, group, order)} ({_REPEATS[order]})"
    if their_group > 1 and their_order != order:
        said += f", where the reference's reads {_rule(heads, their_group, their_order)}"
    return said


def _rule(heads: int, group: int, order: str) -> str:
    """The kv head query head h reads (kv_granularity.kv_head_of), in words."""
    return f"h % {heads // group}" if order == "tiled" else f"h // {group}"


_REPEATS = {"grouped": "Llama's repeat_kv, repeat_interleave", "tiled": "x-transformers' repeat, torch's .repeat"}


def _kv_follow_the_reference(ctx: Context, found: Found) -> bool:
    """Whether the keys and values, each at its key/value heads, are the reference's, or cannot be
    compared (other weights, other shapes, an earlier finding that explains them)."""
    judged = [s for s in KV_STAGES if ctx.compare(s, found) and ctx.pair.both(s) is not None]
    return not any(ctx.differs(s) for s in judged)


def _grouping(captured: Capture) -> tuple[int, str]:
    """How many query heads share one key/value head (1: none share) and in which order: from its own
    kv heads, before the diagnosis viewed its keys at the other side's granularity
    (attnlab.diagnosis.kv_granularity)."""
    queries, keys, values = (captured.stages.get(s) for s in ("queries", *KV_STAGES))
    if queries is None or keys is None or values is None:
        return 1, "grouped"
    kv, order = (captured.kv_heads, captured.kv_order) if captured.kv_heads else kv_grouping(captured)
    heads = queries.shape[1]
    return (heads // kv, order) if kv < heads and heads % kv == 0 else (1, "grouped")


def output(ctx: Context, found: Found) -> list[Finding]:
    """The module's return value: a wrong tensor returned is always a finding, whatever came before."""
    out, ref = ctx.v.stages.get("output"), ctx.ref.stages.get("output")
    if out is None or ref is None:
        return []
    merged = _merge_and_projection(ctx, found)
    if merged:
        return merged
    looks_like = _output_looks_like(ctx, out)
    if out.shape != ref.shape and not (found.explained and looks_like is None):  # else a consequence
        what = f"it is the {looks_like}" if looks_like else f"an unknown width of {out.shape[-1]} columns"
        return [finding("wrong_output", "output", f"the module returned shape "
                        f"{tuple(ctx.v.native_shapes['output'])} where {tuple(ctx.ref.native_shapes['output'])} was "
                        f"expected: {what}, not the context vectors; return attn_weights @ values (merged over the "
                        f"heads and projected as the reference does).")]
    if looks_like and ctx.shared and not found.explained and ctx.judged("output") and ctx.differs("output"):
        return [finding("wrong_output", "output", f"the module returned the {looks_like}, not the context vectors; "
                        f"return attn_weights @ values.")]
    if ctx.compare("output", found) and ctx.differs("output") and not ctx.v.output_is_context and (
            ctx.compare("context", found) and not ctx.differs("context")):  # a context not seen is no match
        return [finding("output_path", "output", "the context matches the reference but the output does not: check "
                        "the lines after attn_weights @ values (merging the heads, the output projection).")]
    return []


def _output_looks_like(ctx: Context, out: torch.Tensor) -> str | None:
    """Which captured stage the returned tensor is, if any (the weights, the values, ...)."""
    words = {"weights": "attention weights (attn_weights)", "scaled_scores": "scaled scores",
             "scores": "attention scores (attn_scores)", "values": "values", "queries": "queries",
             "keys": "keys", "inputs": "inputs"}
    for stage, word in words.items():
        mine = ctx.v.stages.get(stage)
        if mine is not None and mine.numel() == out.numel() and torch.equal(mine.reshape(out.shape), out):
            return word
    return None


def _merge_and_projection(ctx: Context, found: Found) -> list[Finding]:
    """head_merge and out_proj, read from the variant's own tensors (its context, what its output
    projection was given, its output) and the reference's structure (whether it projects, how
    often), so it holds with weights=native too; with shared weights only where the output differs."""
    out, ref_out, ctx_vec = ctx.v.stages.get("output"), ctx.ref.stages.get("output"), ctx.v.stages.get("context")
    # recognised changes only (RoPE, a window): the context moved on purpose, the merge is still judged
    deliberate = bool(found.findings) and not found.errors()
    if ctx_vec is None or ctx_vec.dim() != 4 or (found.explained and not deliberate) or out.shape != ref_out.shape:
        return []  # a width: shape_projection at its projection, or wrong_output
    if not ctx.pair.observed("context"):
        return []  # a context in a layout attnlab cannot place says nothing of how heads were merged
    differs = ctx.shared and ctx.judged("output") and ctx.differs("output")
    if ctx.shared and not (differs and "context" in ctx.ref.stages and (deliberate or not ctx.differs("context"))):
        return []  # the output matches, or the context already differs: not about the lines after it
    b, h, n, hd = ctx_vec.shape
    merged = ctx_vec.transpose(1, 2).reshape(b, n, h * hd)  # (b, num_tokens, d_out), as the source merges
    unmerged = ctx_vec.reshape(b, n, h * hd)  # the same without the transpose
    tol = ctx.tolerance("context", ctx.v)
    scrambled = lambda t: h > 1 and n > 1 and _close(t, unmerged, tol) and not _close(t, merged, tol)  # noqa: E731
    ours, theirs = ctx.v.out_inputs, ctx.ref.out_inputs
    if theirs and not ours and (scrambled(out) or _close(out, merged, tol)):
        how = " (merged without the transpose, too)" if scrambled(out) else ""
        return [finding("out_proj", "output", f"the output is the merged context_vec itself{how}: self.out_proj is "
                        f"never applied; the source ends with context_vec = self.out_proj(context_vec).")]
    if theirs and ours and (ours[0].dim() != 3 or ours[0].shape[-1] != h * hd):
        return [finding("out_proj", "output", f"the output projection is applied per head, to a tensor of shape "
                        f"{tuple(ours[0].shape)} before the heads are merged, so it cannot combine them; merge the "
                        f"heads into (b, num_tokens, d_out) first, then apply self.out_proj = nn.Linear(d_out, "
                        f"d_out) once.")]
    if differs and theirs and len(ours) > len(theirs):
        return [finding("out_proj", "output", f"the output projection is applied {len(ours)} times where the "
                        f"reference applies it {len(theirs)} time{'s' if len(theirs) > 1 else ''}; apply "
                        f"self.out_proj once, to the merged context_vec.")]
    if scrambled(ours[0] if ours else out):
        return [finding("head_merge", "output", "the context is merged back with .reshape(b, num_tokens, d_out) (or "
                        ".view) without .transpose(1, 2) first, so each token's output row holds pieces of other "
                        "tokens from one head (heads and tokens mixed); use context_vec.transpose(1, 2).reshape(b, "
                        "num_tokens, d_out), as the source does.")]
    return []
