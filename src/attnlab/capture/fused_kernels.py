"""Kernels that never materialise the weights, read from their arguments.

`F.scaled_dot_product_attention`, FlexAttention's operator and `F.multi_head_attention_forward`
(`nn.MultiheadAttention`): scores, scaled scores and weights (and for nn.MultiheadAttention every
stage but the output) are computed by attnlab from the kernel's own inputs, mask and scale, and
marked `reconstructed`."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import torch
import torch.nn.attention.flex_attention as flex_attention_api
import torch.nn.functional as F

from attnlab.capture.provenance import TERMS, Head, Recording
from attnlab.capture.tags import Tag
from attnlab.capture.torch_calls import bind

_SDPA_PARAMETERS = ("query", "key", "value", "attn_mask", "dropout_p", "is_causal", "scale", "enable_gqa")


def attend(queries: torch.Tensor, keys: torch.Tensor, *, scale: float, mask: torch.Tensor | None = None,
           is_causal: bool = False, mask_means_keep: bool = True) -> dict[str, torch.Tensor]:
    """Scores, scaled scores and weights as an attention kernel computes them from its inputs.

    `mask_means_keep`: SDPA's boolean mask is True where a query may look; nn.MultiheadAttention's
    is True where it may not. A float mask is added to the scaled scores.
    """
    if keys.shape[-3] != queries.shape[-3] and queries.dim() >= 3:  # grouped keys (enable_gqa)
        keys = keys.repeat_interleave(queries.shape[-3] // keys.shape[-3], dim=-3)
    scores = queries @ keys.mT  # (b, num_heads, num_tokens, num_tokens)
    scaled = scores * scale
    n_query, n_key = scaled.shape[-2:]
    if is_causal:
        hidden = torch.ones(n_query, n_key, dtype=torch.bool).triu(1)
        scaled = scaled.masked_fill(hidden, -torch.inf)
    if mask is not None and mask.dtype == torch.bool:
        scaled = scaled.masked_fill(~mask if mask_means_keep else mask, -torch.inf)
    elif mask is not None:
        scaled = scaled + mask
    weights = torch.softmax(scaled, dim=-1)
    if mask_means_keep:  # SDPA gives a query that may see no key zero weights, not softmax's 0/0
        weights = weights.masked_fill(torch.isneginf(scaled).all(dim=-1, keepdim=True), 0.0)
    return {"scores": scores, "scaled_scores": scaled, "weights": weights}


def sdpa(rec: Recording, args: tuple[Any, ...], kwargs: dict[str, Any], out: torch.Tensor) -> None:
    call = {**dict(zip(_SDPA_PARAMETERS, args)), **kwargs}  # a builtin: no signature to bind
    if not all(isinstance(call.get(n), torch.Tensor) for n in _SDPA_PARAMETERS[:3]):
        return
    q, k, v = call["query"], call["key"], call["value"]
    head = Head()
    for stage, tensor in (("queries", q), ("keys", k), ("values", v)):
        tag = rec.tag(tensor)
        if tag is not None and tag.factor != 1.0 and tag.base is not None:
            head.prescale[stage] = tag.factor
            tensor = tag.base
        head.found[stage] = tensor
        head.sources[stage] = rec.role(tag) if tag is not None else None
    factor = math.prod(head.prescale.values())
    scale = call.get("scale")
    scale = (q.shape[-1] ** -0.5 if scale is None else float(scale)) * factor
    head.found.update(attend(head.found["queries"], head.found["keys"], scale=scale, mask=call.get("attn_mask"),
                             is_causal=bool(call.get("is_causal")), mask_means_keep=True))
    head.logit_factor, head.terms = scale, _computed(rec, call.get("attn_mask"))
    head.reconstructed |= {"scores", "scaled_scores", "weights"}
    head.softmax_dim, head.softmax_axis = q.dim() - 1, 3
    if call.get("dropout_p"):
        head.unseen.add("weights_applied")  # drawn inside the kernel
    head.found["context"] = out
    head.roles = (head.sources.get("queries"), head.sources.get("keys"))
    again = next((h for h in rec.heads if all(_same(h.found.get(s), head.found[s]) for s in _SAME_MAP)), None)
    if again is not None:  # the same weights once more: on the same values, or on another part of a split V
        again.value_products += not _same(again.found.get("values"), head.found["values"])
        return
    head.value_products = 1
    rec.heads.append(head)
    rec.set_tag(out, Tag("context", head=len(rec.heads) - 1))


def _computed(rec: Recording, mask: Any) -> bool:
    """Whether a float mask given to a kernel is a term the module computed from its inputs or
    weights (Granite Speech's relative-position logits, WavLM's gated bias), not a mask."""
    tag = rec.tag(mask)
    return tag is not None and tag.kind in TERMS and mask.is_floating_point()


_SAME_MAP = ("queries", "keys", "weights")  # what makes a kernel call's weights those of an earlier one


def _same(a: torch.Tensor | None, b: torch.Tensor) -> bool:
    return a is b or (a is not None and a.shape == b.shape and bool(torch.equal(a, b)))


def flex_attention(rec: Recording, args: tuple[Any, ...], out: Any) -> None:
    """FlexAttention's operator (query, key, value, score_mod, block mask as a tuple, scale, ...):
    read as SDPA with the mask its block mask's mask_mod makes, and score_mod as an added float
    mask (what it changes in the scaled scores)."""
    q, k, v, score_mod, block_mask, scale = args[:6]
    if not all(isinstance(t, torch.Tensor) for t in (q, k, v)) or not isinstance(out, (tuple, list)):
        return
    keep = flex_attention_api.create_mask(block_mask[-1], q.shape[0], q.shape[1], q.shape[-2], k.shape[-2],
                                          device=q.device)  # (b, num_heads, num_tokens, num_tokens)
    mask: torch.Tensor = keep
    if score_mod is not None and getattr(score_mod, "__name__", "") != "_identity":
        scaled = attend(q, k, scale=q.shape[-1] ** -0.5 if scale is None else float(scale))["scaled_scores"]
        grid = [torch.arange(n, device=q.device) for n in (*q.shape[:2], q.shape[-2], k.shape[-2])]
        from torch._dynamo._trace_wrapped_higher_order_op import TransformGetItemToIndex  # seconds to import

        with TransformGetItemToIndex():  # as torch's create_mask runs a score_mod on whole tensors
            modified = flex_attention_api._vmap_for_bhqkv(score_mod, prefix=(0,))(scaled, *grid)
        mask = torch.where(keep, modified - scaled, -torch.inf)  # (b, num_heads, num_tokens, num_tokens)
    sdpa(rec, (q, k, v), {"attn_mask": mask, "scale": scale}, out[0])


def multi_head_attention(rec: Recording, func: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """nn.MultiheadAttention's functional form: every stage from its own arguments, its output its own."""
    out = func(*args, **kwargs)
    call = bind(func, args, kwargs)
    if call is None or call.get("key_padding_mask") is not None:
        return out
    # each projection of its own input: a module may pass keys or values other than its queries
    inputs = [call[name].transpose(0, 1) for name in ("query", "key", "value")]  # (b, num_tokens, embed_dim) each
    num_heads, embed_dim = int(call["num_heads"]), int(call["embed_dim_to_check"])
    if call.get("use_separate_proj_weight"):
        weights = [call["q_proj_weight"], call["k_proj_weight"], call["v_proj_weight"]]
    else:
        weights = list(call["in_proj_weight"].chunk(3))
    biases = list(call["in_proj_bias"].chunk(3)) if call.get("in_proj_bias") is not None else [None] * 3
    head = Head(reconstructed={"queries", "keys", "values", "scores", "scaled_scores", "weights", "context"})
    for stage, x, weight, bias in zip(("queries", "keys", "values"), inputs, weights, biases):
        projected = F.linear(x, weight, bias)  # (b, num_tokens, embed_dim)
        head.found[stage] = projected.view(*x.shape[:2], num_heads, embed_dim // num_heads).transpose(1, 2)
        head.sources[stage] = stage
    mask = call.get("attn_mask")
    batch = inputs[0].shape[0]
    if mask is not None and mask.dim() == 3 and mask.shape[0] == batch * num_heads:  # torch's per-head form
        mask = mask.view(batch, num_heads, *mask.shape[-2:])  # (b, num_heads, num_tokens, num_tokens)
    head.found.update(attend(head.found["queries"], head.found["keys"], scale=(embed_dim // num_heads) ** -0.5,
                             mask=mask, is_causal=bool(call.get("is_causal")) and mask is None,
                             mask_means_keep=False))
    head.logit_factor, head.terms = (embed_dim // num_heads) ** -0.5, _computed(rec, call.get("attn_mask"))
    head.found["context"] = head.found["weights"] @ head.found["values"]  # (b, num_heads, num_tokens, head_dim)
    head.softmax_dim = head.softmax_axis = 3
    head.roles = ("queries", "keys")
    rec.heads.append(head)
    return out


@contextmanager
def flex_attention_eager() -> Iterator[None]:
    """FlexAttention on its eager path while capturing: its default path compiles the operator with
    torch.compile, which then has to trace the recorder's __torch_function__ and fails; the eager
    path computes the same attention and hands the recorder the operator's arguments."""
    before = flex_attention_api._FLEX_ATTENTION_DISABLE_COMPILE_DEBUG
    flex_attention_api._FLEX_ATTENTION_DISABLE_COMPILE_DEBUG = True
    try:
        yield
    finally:
        flex_attention_api._FLEX_ATTENTION_DISABLE_COMPILE_DEBUG = before
