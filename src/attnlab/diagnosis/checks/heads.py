"""Heads (section 3.6): the split into heads, keys shared by groups of heads, and what the module
does after attn_weights @ values (merging the heads, the output projection, what it returns).

Every check compares with an independent computation: the reference's own stages re-arranged the
way the mistake arranges them (a split without the transpose, a merge without it)."""

from __future__ import annotations

import torch

from attnlab.capture.recorder import Capture
from attnlab.diagnosis.context import Context, Found
from attnlab.diagnosis.diagnostics import max_abs_diff
from attnlab.diagnosis.finding_code import Code, finds
from attnlab.diagnosis.kv_granularity import KV_STAGES, kv_grouping
from attnlab.record import Finding

_SPLIT_STAGES = ("queries", "keys", "values")

HEAD_SPLIT = Code(
    "head_split", _SPLIT_STAGES, "error",
    "heads split with .view(b, num_heads, num_tokens, head_dim), without the transpose",
    "{names} are split into heads with .view(b, num_heads, num_tokens, head_dim) directly, so each head holds rows "
    "of other tokens and each token's columns are spread over the heads (tokens and heads scrambled); split with "
    ".view(b, num_tokens, num_heads, head_dim), then .transpose(1, 2), as the source does.",
    "heads split with `.view(b, num_heads, num_tokens, head_dim)` instead of `.view(b, num_tokens, num_heads, "
    "head_dim).transpose(1, 2)`: tokens and heads scrambled",
    ("mha_head_split",), "heads")

KV_HEADS = Code(
    "kv_heads", ("keys",), "info",
    "keys and values shared by groups of query heads (GQA, MQA)",
    "keys and values have {shared} head{s} for {query_heads} query heads: each is shared by a group of {group} query heads "
    "({kind}){order}; deliberate, so the differences it causes after the keys are its consequences, not findings.",
    "keys and values shared by groups of query heads (GQA, MQA), with the group size and the order: grouped (query "
    "head h reads kv head h // group, Llama's `repeat_kv`) or tiled (h % kv_heads, x-transformers' `repeat`); its "
    "downstream differences are its consequences. Said only where the shared keys and values are the reference's: "
    "a wrong key index stays `key_index`",
    ("gqa", "mqa", "mha_grouped_kv"), "heads")

OUT_PROJ = Code(
    "out_proj", ("output",), "error",
    "the output is not out_proj(merged context): missing, applied twice, or per head",
    {"missing": "the output is the merged context_vec itself{how}: self.out_proj is never applied; the source ends "
                "with context_vec = self.out_proj(context_vec).",
     "per_head": "the output projection is applied per head, to a tensor of shape {shape} before the heads are "
                 "merged, so it cannot combine them; merge the heads into (b, num_tokens, d_out) first, then apply "
                 "self.out_proj = nn.Linear(d_out, d_out) once.",
     "repeated": "the output projection is applied {times} times where the reference applies it {theirs} time{s}; "
                 "apply self.out_proj once, to the merged context_vec."},
    "the output is not `out_proj(merged context)`: missing, applied twice, or per head",
    ("mha_out_proj_missing", "mha_out_proj_twice", "mha_out_proj_per_head"), "heads")

HEAD_MERGE = Code(
    "head_merge", ("output",), "error",
    "the context merged with .reshape(b, num_tokens, d_out) without .transpose(1, 2)",
    "the context is merged back with .reshape(b, num_tokens, d_out) (or .view) without .transpose(1, 2) first, so "
    "each token's output row holds pieces of other tokens from one head (heads and tokens mixed); use "
    "context_vec.transpose(1, 2).reshape(b, num_tokens, d_out), as the source does.",
    "the context merged with `.reshape(b, num_tokens, d_out)` without `.transpose(1, 2)` first",
    ("mha_head_merge",), "heads")

WRONG_OUTPUT = Code(
    "wrong_output", ("output",), "error",
    "the module returned something other than the context (the weights, the scores, ...)",
    {"shape": "the module returned shape {shape} where {expected} was expected: {what}, not the context vectors; "
              "return attn_weights @ values (merged over the heads and projected as the reference does).",
     "stage": "the module returned the {looks_like}, not the context vectors; return attn_weights @ values."},
    "the module returned something other than the context: the attention weights, the scores, the values, or an "
    "unknown width (e.g. `return attn_weights`)",
    ("tests/diagnosis/test_truths.py::test_returning_the_weights_is_a_wrong_output_finding",), "book")

OUTPUT_PATH = Code(
    "output_path", ("output",), "error",
    "the context matches the reference but the output does not: the lines after attn_weights @ values",
    "the context matches the reference but the output does not: check the lines after attn_weights @ values "
    "(merging the heads, the output projection).",
    "the context matches the reference but the output does not: the lines after `attn_weights @ values` (merging "
    "the heads, the output projection)",
    ("tests/diagnosis/test_codes.py::test_a_wrong_output_after_a_right_context_is_output_path",), "book")


def _close(a: torch.Tensor, b: torch.Tensor, tol: float) -> bool:
    return a.shape == b.shape and max_abs_diff(a, b) <= tol


@finds(HEAD_SPLIT)
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
    return [HEAD_SPLIT(split[0], names=names)]


@finds(KV_HEADS)
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
    return [KV_HEADS("keys", shared=shared, s="s" if shared > 1 else "", query_heads=heads, group=group, kind=kind,
                     order=_order(heads, (group, order), theirs), heads=list(range(heads)))]


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


@finds(OUT_PROJ, HEAD_MERGE, WRONG_OUTPUT, OUTPUT_PATH)
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
        return [WRONG_OUTPUT("output", "shape", shape=tuple(ctx.v.native_shapes["output"]),
                             expected=tuple(ctx.ref.native_shapes["output"]), what=what)]
    if looks_like and ctx.shared and not found.explained and ctx.judged("output") and ctx.differs("output"):
        return [WRONG_OUTPUT("output", "stage", looks_like=looks_like)]
    if ctx.compare("output", found) and ctx.differs("output") and not ctx.v.output_is_context and (
            ctx.compare("context", found) and not ctx.differs("context")):  # a context not seen is no match
        return [OUTPUT_PATH("output")]
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
    if ctx_vec is None or ctx_vec.dim() != 4 or (found.explained and not deliberate) or out is None or ref_out is None \
            or out.shape != ref_out.shape:
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

    def scrambled(t: torch.Tensor) -> bool:
        return h > 1 and n > 1 and _close(t, unmerged, tol) and not _close(t, merged, tol)

    ours, theirs = ctx.v.out_inputs, ctx.ref.out_inputs
    if theirs and not ours and (scrambled(out) or _close(out, merged, tol)):
        how = " (merged without the transpose, too)" if scrambled(out) else ""
        return [OUT_PROJ("output", "missing", how=how)]
    # the merged context as its rows, in any layout of them (SAM 3's (b, H, W, d_out) grid): merged, whatever its rank
    if theirs and ours and (ours[0].numel() != b * n * h * hd or ours[0].shape[-1] != h * hd):
        return [OUT_PROJ("output", "per_head", shape=tuple(ours[0].shape))]
    if differs and theirs and len(ours) > len(theirs):
        return [OUT_PROJ("output", "repeated", times=len(ours), theirs=len(theirs), s="s" if len(theirs) > 1 else "")]
    if scrambled(ours[0] if ours else out):
        return [HEAD_MERGE("output")]
    return []
