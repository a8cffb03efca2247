"""A variant that cannot stand in for a model's attention layer, refused before the model loads.

A layer of several heads takes a variant that splits its width into heads (its constructor names
the head count, under any spelling attnlab knows) or one built from the model's config; a
single-head class (the book's SelfAttention_v1, `variant=reference`) would be compared against a
multi-head layer and every difference blamed on the model. The head count is read from the saved
folder's config.json or the `hf:TYPE` sizes (attnlab.model.declared_config), without loading anything; a model whose count is only
known once built is checked as before, when the variant is built for its layer.
"""

from __future__ import annotations

from attnlab.errors import UserError
from attnlab.model.config_variants import takes_config
from attnlab.model.declared_config import declared_config
from attnlab.model.model_spec import ModelSpec
from attnlab.modules.families import spellings
from attnlab.modules.registry import get_variant
from attnlab.modules.variant_spec import constructor_parameters

FITTING = "multi_head_attention, gqa, mqa (the zoo's multi-head classes), or variant=hf:TYPE"


def declared_heads(spec: ModelSpec) -> int | None:
    """The model's head count as its config states it before any weight is read; None: not stated."""
    config = declared_config(spec) or {}
    return next((config[name] for name in spellings("num_heads") if isinstance(config.get(name), int)), None)


def check_variant_fits(variant: str, spec: ModelSpec) -> None:
    """One line when `variant` has one head and the model's layers several."""
    heads = declared_heads(spec)
    if heads is None or heads == 1 or variant.startswith("hf:"):
        return
    found = get_variant(variant)
    if takes_config(found.cls):
        return
    named = {parameter.name for parameter in constructor_parameters(found)}
    if named & set(spellings("num_heads")) or any(p.kind == p.VAR_KEYWORD for p in constructor_parameters(found)):
        return
    raise UserError(f"variant={variant}: a single-head class ({found.cls.__name__} takes no head count) cannot stand "
                    f"in for the model's {heads}-head attention; a variant that fits: {FITTING}")
