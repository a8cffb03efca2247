"""Every diagnostics column a record's `diagnostics` (and the tables' columns of the same names)
may hold, declared once with what it means: the reference page is generated from it and a test
fails when a run writes a column not declared here."""

from __future__ import annotations

import re

STAGE = "<stage>"  # any captured stage: inputs, queries, keys, values, scores, scaled_scores, weights, ...
HEAD = "<h>"  # a head's index: the per-head columns of a multi-head run

DIAGNOSTIC_COLUMNS: tuple[tuple[str, str], ...] = (
    (f"divergence_{STAGE}", "max |variant - reference| over the stage, at the reference's granularity "
                            "(NaN: the shapes differ)"),
    (f"relative_divergence_{STAGE}", "divergence_<stage> divided by the reference stage's largest |value|"),
    (f"non_finite_{STAGE}", "NaN or inf entries in the variant's stage that no mask placed"),
    (f"shape_ok_{STAGE}", "1 where the variant's stage has the predicted shape (the reference's), else 0"),
    ("weights_row_sum_max_err", "max |sum over keys - 1| of the attention weights (0: each row a distribution)"),
    ("weights_col_sum_max_err", "max |sum over queries - 1| (near 0 when the softmax ran over the queries)"),
    ("weights_min", "the smallest attention weight"),
    ("weights_max", "the largest attention weight"),
    ("weights_entropy_mean", "the weights' row entropy in nats, averaged over rows"),
    ("weights_entropy_norm_mean", "weights_entropy_mean divided by log n_tokens (1: uniform rows)"),
    ("weights_row_max_mean", "each row's largest weight, averaged (1: every query attends to one key)"),
    ("weights_first_token_mass", "the weight the rows give the first key, averaged (an attention sink)"),
    ("weights_softmax_max_err", "max |weights - softmax(scaled_scores)| along the softmax's axis"),
    (f"weights_entropy_mean_h{HEAD}", "weights_entropy_mean of one head"),
    (f"weights_row_max_mean_h{HEAD}", "weights_row_max_mean of one head"),
    (f"weights_first_token_mass_h{HEAD}", "weights_first_token_mass of one head"),
    ("scale_observed", "the factor between scores and scaled_scores, as the module applied it"),
    ("scale_expected", "1/sqrt(head_dim), or the factor the module's config declares"),
    ("softmax_dim", "the axis the softmax ran over, in the canonical (batch, heads, queries, keys) view"),
    ("batched_single_max_abs_diff", "max |context row - softmax(its own softmax-input row) @ values|: the "
                                    "source's check of every token by hand"),
)


def _pattern(column: str) -> re.Pattern[str]:
    text = re.escape(column).replace(re.escape(STAGE), r"[a-z_]+").replace(re.escape(HEAD), r"\d+")
    return re.compile(text)


_PATTERNS = tuple(_pattern(column) for column, _ in DIAGNOSTIC_COLUMNS)


def declared(name: str) -> bool:
    """Whether a diagnostics column's name is one DIAGNOSTIC_COLUMNS declares."""
    return any(pattern.fullmatch(name) for pattern in _PATTERNS)


__all__ = ["DIAGNOSTIC_COLUMNS", "declared"]
