"""Which multi-head causal attention class trains for a variant's name.

A variant that declares its multi-head counterpart (`@attnlab.variant(multi_head=...)`: the book's
single-head mistakes declare the zoo's class with the same change in every head, `mha_unscaled`
for `unscaled`) trains as that class; `reference` is the counterpart the book's SelfAttention_v1
declares, its MultiHeadAttention. A variant whose constructor takes context_length and num_heads
(the modern zoo, yours) is built as it is; one that takes context_length but no heads (a
CausalAttention of yours) is run once per head (`PerHeadAttention`); a 2-D class has no batch and
no causal mask and is refused.

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

TRAINABLE = ("Cls(d_in, d_out, context_length, dropout, num_heads), Cls(d_in, d_out, context_length, dropout) (run "
             "once per head), or Cls(config) with one config class (its parameter's annotation, or the only ...Config "
             "in its file) holding block_size, n_positions or max_position_embeddings")
MODEL_CHANGES = {"no_positions": "no position embedding: the tokens' order reaches the model only through the causal mask"}


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
    if name in ("reference", BUILTIN + "reference"):  # always the book's: training compares every variant with it
        book = get_variant(BUILTIN + "reference").multi_head
        made = _declared(BUILTIN + str(book), d_model, context_length, num_heads, d_out)
        return replace(made, name=name, describe=f"{made.describe} (the book's, section 3.6.2)")
    if name in MODEL_CHANGES:
        reference = _counterpart(BUILTIN + "reference", d_model, context_length, num_heads, d_out)
        return Counterpart(name, reference.make, f"{reference.describe} in a GPTModel with {MODEL_CHANGES[name]}",
                           positions=False)
    spec = get_variant(name)
    if spec.multi_head is None:
        return _declared(name, d_model, context_length, num_heads, d_out)
    # a built-in's counterpart is attnlab's own, whatever a plugin of yours is called
    made = _declared(BUILTIN + spec.multi_head if spec.builtin else spec.multi_head, d_model, context_length,
                     num_heads, d_out)
    return replace(made, name=name, describe=f"{made.describe}: the multi-head counterpart {name} declares")


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
        return Counterpart(name, construction.instantiate,
                           f"{cls_name} ({name.removeprefix(BUILTIN)}), num_heads={num_heads}")
    head = plan(name, {**values, "d_out": d_out // num_heads})
    return Counterpart(name, lambda: PerHeadAttention(head.instantiate, num_heads, d_out),
                       f"PerHeadAttention: {num_heads} x {cls_name} ({name}), each {d_out // num_heads} wide")
