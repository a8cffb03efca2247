"""A variant that cannot stand in for a model's attention layer, refused before the model loads.

A layer of several heads takes a variant that splits its width into heads (its constructor names
the head count, under any spelling attnlab knows) or one built from the model's config; a
single-head class (the book's SelfAttention_v1, `variant=reference`) would be compared against a
multi-head layer and every difference blamed on the model. The head count is read from the saved
folder's config.json or the `hf:TYPE` sizes (attnlab.model.declared_config, read once), without loading anything; a model
whose count is only known once built is checked as before, when the variant is built for its layer.
"""

from __future__ import annotations

from typing import Any

from attnlab.errors import UserError
from attnlab.model.config_variants import takes_config
from attnlab.modules.families import spellings
from attnlab.modules.registry import get_variant
from attnlab.modules.variant_spec import constructor_parameters

FITTING = "multi_head_attention, gqa, mqa (the zoo's multi-head classes), or variant=hf:TYPE"
DEFAULT = "reference"  # the variant a run gets when it names none


def variant_for_layer(variant: str, heads: int) -> str:
    """The variant a model's layer runs: the default (the book's single-head reference) stands as the
    multi-head counterpart it declares (the book's MultiHeadAttention) in a layer of several heads;
    any other name as it is."""
    counterpart = get_variant(DEFAULT).multi_head if variant == DEFAULT and heads > 1 else None
    return counterpart or variant


def check_variant_fits(variant: str, heads: Any) -> None:
    """One line when `variant` has one head and the model's layers several (`heads`, as the config
    declares them; None: not stated), naming the multi-head counterpart it declares
    (`@attnlab.variant(multi_head=...)`), if any."""
    if not isinstance(heads, int) or heads == 1 or variant.startswith("hf:") or variant == DEFAULT:
        return
    found = get_variant(variant)
    if takes_config(found.cls):
        return
    named = {parameter.name for parameter in constructor_parameters(found)}
    if named & set(spellings("num_heads")) or any(p.kind == p.VAR_KEYWORD for p in constructor_parameters(found)):
        return
    fitting = f"its multi-head counterpart: variant={found.multi_head}" if found.multi_head \
        else f"a variant that fits: {FITTING}"
    raise UserError(f"variant={variant}: a single-head class ({found.cls.__name__} takes no head count) cannot stand "
                    f"in for the model's {heads}-head attention; {fitting}")
