"""Which multi-head causal attention class trains for a variant's name.

The book's single-head mistakes train as their one change made to the book's MultiHeadAttention
(`OneChangeAttention`); `reference` is the book's MultiHeadAttention itself. A variant whose
constructor takes context_length and num_heads (the modern zoo, yours) is built as it is; one that
takes context_length but no heads (a CausalAttention of yours) is run once per head
(`PerHeadAttention`); a 2-D class has no batch and no causal mask and is refused.

A change of the model rather than of its attention (`MODEL_CHANGES`, e.g. `no_positions`) trains
the reference's attention in a GPTModel changed so: in the book, positions enter through the
model's position embedding, never through the attention layer, so no forward run has these names.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

import torch
from torch import nn

from attnlab.errors import UserError
from attnlab.modules.built import plan
from attnlab.modules.registry import SPELLINGS, get_variant
from attnlab.modules.variant_spec import BUILTIN

REFERENCE = "multi_head_attention"  # the book's MultiHeadAttention (section 3.6.2)
BOOK_CHANGES = ("unscaled", "scaled_by_dk", "wrong_softmax_axis", "causal_mask_missing")
TRAINABLE = ("Cls(d_in, d_out, context_length, dropout, num_heads), Cls(d_in, d_out, context_length, dropout) (run "
             "once per head), or Cls(config) with one config class (its parameter's annotation, or the only ...Config "
             "in its file) holding block_size, n_positions or max_position_embeddings")
MODEL_CHANGES = {"no_positions": "no position embedding: the tokens' order reaches the model only through the causal mask"}


class OneChangeAttention(nn.Module):
    """The book's MultiHeadAttention with one of the book's mistakes (`change`, a BOOK_CHANGES name)."""

    mask: torch.Tensor  # a buffer

    def __init__(self, d_in: int, d_out: int, context_length: int, dropout: float, num_heads: int,
                 change: str, qkv_bias: bool = False) -> None:
        super().__init__()
        self.d_out, self.num_heads, self.change = d_out, num_heads, change
        self.head_dim = d_out // num_heads
        self.W_query = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_key = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_value = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.out_proj = nn.Linear(d_out, d_out)
        self.dropout = nn.Dropout(dropout)
        self.register_buffer("mask", torch.triu(torch.ones(context_length, context_length), diagonal=1))
        self.scale = {"unscaled": 1.0, "scaled_by_dk": float(self.head_dim)}.get(change, self.head_dim ** 0.5)
        self.softmax_dim = -2 if change == "wrong_softmax_axis" else -1  # over the queries, not the keys

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, num_tokens, d_in = x.shape  # (b, num_tokens, d_in)
        keys = self.W_key(x).view(b, num_tokens, self.num_heads, self.head_dim).transpose(1, 2)  # (b, num_heads, num_tokens, head_dim)
        queries = self.W_query(x).view(b, num_tokens, self.num_heads, self.head_dim).transpose(1, 2)  # (b, num_heads, num_tokens, head_dim)
        values = self.W_value(x).view(b, num_tokens, self.num_heads, self.head_dim).transpose(1, 2)  # (b, num_heads, num_tokens, head_dim)

        attn_scores = queries @ keys.transpose(2, 3)  # (b, num_heads, num_tokens, num_tokens)
        if self.change != "causal_mask_missing":
            attn_scores.masked_fill_(self.mask.bool()[:num_tokens, :num_tokens], -torch.inf)
        attn_weights = torch.softmax(attn_scores / self.scale, dim=self.softmax_dim)  # (b, num_heads, num_tokens, num_tokens)
        attn_weights = self.dropout(attn_weights)

        context_vec = (attn_weights @ values).transpose(1, 2).reshape(b, num_tokens, self.d_out)  # (b, num_tokens, d_out)
        out: torch.Tensor = self.out_proj(context_vec)  # (b, num_tokens, d_out)
        return out


class PerHeadAttention(nn.Module):
    """The book's MultiHeadAttentionWrapper with an output projection: one single-head module per
    head, each head_dim wide, their contexts side by side."""

    def __init__(self, make_head: Callable[[], nn.Module], num_heads: int, d_out: int) -> None:
        super().__init__()
        self.heads = nn.ModuleList([make_head() for _ in range(num_heads)])
        self.out_proj = nn.Linear(d_out, d_out)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.out_proj(torch.cat([head(x) for head in self.heads], dim=-1))  # (b, num_tokens, d_out)
        return out


@dataclass(frozen=True)
class Counterpart:
    """What trains for a variant's name: `make()` builds one attention layer; `describe` says which class."""

    name: str
    make: Callable[[], nn.Module]
    describe: str
    positions: bool = True  # the GPTModel adds its position embedding
    d_out: int = 0  # the layer's output width (its heads side by side); the block projects it to d_model


def counterpart(name: str, d_model: int, context_length: int, num_heads: int, d_out: int | None = None) -> Counterpart:
    """The multi-head causal attention that trains for variant `name` (its heads `d_out / num_heads`
    wide, `d_out` d_model unless given); a UserError if none can. A plugin of yours named like a
    built-in trains as yours; `builtin:NAME` is attnlab's NAME."""
    made = _counterpart(name, d_model, context_length, num_heads, d_out or d_model)
    return replace(made, d_out=d_out or d_model)


def _counterpart(name: str, d_model: int, context_length: int, num_heads: int, d_out: int) -> Counterpart:
    own = name.removeprefix(BUILTIN)
    # "reference" is always the book's: training compares every variant with it
    if own == name and own in (REFERENCE, *BOOK_CHANGES) and get_variant(name).yours:
        return _declared(name, d_model, context_length, num_heads, d_out)
    if own in ("reference", REFERENCE):
        cls = get_variant(BUILTIN + REFERENCE).cls  # attnlab's own, whatever a plugin of yours is called
        return Counterpart(name, lambda: cls(d_model, d_out, context_length, 0.0, num_heads),
                           f"{cls.__name__} (the book's, section 3.6.2)")
    if own in BOOK_CHANGES:
        return Counterpart(name, lambda: OneChangeAttention(d_model, d_out, context_length, 0.0, num_heads, own),
                           f"OneChangeAttention(change={own!r}): the book's MultiHeadAttention with {own}")
    if name in MODEL_CHANGES:
        reference = _counterpart(BUILTIN + REFERENCE, d_model, context_length, num_heads, d_out)
        return Counterpart(name, reference.make, f"{reference.describe} in a GPTModel with {MODEL_CHANGES[name]}",
                           positions=False)
    return _declared(name, d_model, context_length, num_heads, d_out)


def _declared(name: str, d_model: int, context_length: int, num_heads: int, d_out: int) -> Counterpart:
    values = {"d_in": d_model, "d_out": d_out, "context_length": context_length, "dropout": 0.0,
              "num_heads": num_heads, "num_kv_heads": None, "qkv_bias": False, "attn_implementation": "eager",
              "n_tokens": context_length}
    construction = plan(name, values)
    cls_name = construction.spec.cls.__name__
    if not construction.context_length:
        config = getattr(construction.spec.cls, "config_cls", None)  # a ConfigConstructor's config class
        given = ", ".join([*map(repr, construction.args), *(f"{k}={v!r}" for k, v in construction.kwargs.items())])
        built = f"{cls_name}(config: {config.__name__}, filled as {given})" if config else f"{cls_name}({given})"
        raise UserError(f"variant={name}: {built} is all attnlab could fill: no context length, the size of the "
                        f"causal mask a language model's attention needs; training builds {TRAINABLE}")
    if any(spelling in construction.kwargs for spelling in SPELLINGS["num_heads"]):
        return Counterpart(name, construction.instantiate, f"{cls_name} ({name}), num_heads={num_heads}")
    head = plan(name, {**values, "d_out": d_out // num_heads})
    return Counterpart(name, lambda: PerHeadAttention(head.instantiate, num_heads, d_out),
                       f"PerHeadAttention: {num_heads} x {cls_name} ({name}), each {d_out // num_heads} wide")
