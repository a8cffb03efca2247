"""The order the checks run in, and which codes each finding switches off. Each code itself (its
stage, severity, meaning, message and documentation) is declared beside its check
(attnlab.diagnosis.finding_code); this module collects them.

attnlab.diagnosis.check_runner runs each check once, in the order of CHECKS; a finding whose code an
earlier finding suppresses is dropped (a check whose codes are all suppressed does not run). Adding
a check is its file (the check and its `Code`s) and one line in CHECKS.
"""

from __future__ import annotations

import difflib
from collections.abc import Collection

from attnlab.diagnosis import recognisers
from attnlab.diagnosis.checks import (
    batch,
    dropout_scale,
    heads,
    mask,
    precision,
    scaling,
    softmax_dropout,
    sources,
    unplaced,
)
from attnlab.diagnosis.finding_code import FIRST_WHERE_IT_SHOWS, SEVERITIES, Code, DeclaredCheck

__all__ = ["BY_CODE", "CHECKS", "CODES", "FIRST_WHERE_IT_SHOWS", "SEVERITIES", "SUPPRESSES", "Code", "closest"]

CHECKS: tuple[DeclaredCheck, ...] = (
    # deliberate changes first: each would otherwise read as a wrong source or a wrong scale
    recognisers.rotary,
    recognisers.xpos,
    recognisers.added_positions,
    recognisers.qk_norm,
    recognisers.query_scale,
    recognisers.cosine_attention,
    recognisers.window,
    recognisers.position_bias,
    recognisers.softcap,
    recognisers.declared_scale,
    recognisers.score_terms,
    recognisers.clipped_qkv,
    recognisers.latent_attention,
    recognisers.sparse_keys,
    recognisers.attention_sinks,
    recognisers.output_gate,
    # the mask, the shapes and the heads
    mask.mask_shape,
    mask.non_finite,
    sources.shapes,
    heads.head_split,
    heads.kv_heads,
    # the source's debugging order: query source, key index, scaling, softmax axis
    sources.scores_transposed,
    sources.query_source,
    sources.key_index,
    mask.masked,
    scaling.scaling,
    softmax_dropout.softmax,
    softmax_dropout.dropout,
    dropout_scale.dropout_unscaled,
    sources.value_path,
    # after the context
    heads.output,
    batch.batched_single,
    batch.batch_mixing,
    precision.precision,
    # what cannot be compared: every check leaves those stages alone; last, so no check skips a stage for it
    unplaced.not_observable,
)

_MASK_CODES = ("mask_missing", "mask_offset", "mask_fill_value", "mask_after_softmax")

# code -> the codes dropped once it is found
SUPPRESSES: dict[str, tuple[str, ...]] = {
    "xpos": ("query_source", "key_index", "rotary_misapplied"),
    "added_positions": ("query_source", "key_index"),
    "cosine_attention": ("scaling",),
    "window": _MASK_CODES,
    "position_bias": ("scaling", "score_terms"),
    "softcap": ("scaling",),
    "declared_scale": ("scaling",),
    "latent_attention": ("shape_projection",),
    "sparse_keys": _MASK_CODES,
    "attention_sinks": ("not_softmax", "softmax_axis", "mask_after_softmax"),
    "output_gate": ("out_proj", "head_merge", "output_path", "wrong_output"),
    "mask_after_softmax": ("not_softmax",),
    "mask_offset": ("non_finite",),
    "scores_transposed": ("query_source", "key_index"),
    "scaling": ("not_softmax",),
}

CODES: tuple[Code, ...] = tuple(code for check in CHECKS for code in check.codes)  # in the order they run
BY_CODE: dict[str, Code] = {c.code: c for c in CODES}

def closest(code: str, also: Collection[str] = ()) -> str | None:
    """The declared code nearest to a mistyped one (`scalling` -> `scaling`), if any is near; `also`:
    codes declared above the diagnosis (a model run's, attnlab.model.finding_codes)."""
    near = difflib.get_close_matches(code, [*BY_CODE, *also], n=1, cutoff=0.6)
    return near[0] if near else None
