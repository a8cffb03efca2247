"""What a real model's heads do on real text: previous-token heads, first-token (sink) heads, uniform heads.

Read from the layer's own attention weights (batch item 0), over the query rows that have a
choice (row 0 can only look at itself): a head whose mean weight on the previous token, or on
the first token, is at least THRESHOLD; a head whose rows keep at least UNIFORM of the entropy
of an even spread over the keys they may see. Info, about the model, not a mistake; each code is
declared here (attnlab.model.finding_codes collects a model run's codes).
"""

from __future__ import annotations

import numpy as np

from attnlab.diagnosis.finding_code import MODEL_TABLE, Code
from attnlab.record import Finding

THRESHOLD = 0.5
UNIFORM = 0.95
_SHOWN_BY = ("tests/model/test_head_patterns.py::test_each_pattern_is_named_for_its_head_only",)


def _pattern(code: str, meaning: str, what: str) -> Code:
    """A head pattern's code: info at the weights, its message the heads found and their figures."""
    return Code(code, ("weights",), "info", meaning,
                f"the model's own heads on these inputs: {meaning}: {{shown}}, {what} over the rows after the first",
                f"the model's own heads on the text: {meaning} (at least the threshold of attnlab.model.head_patterns)",
                _SHOWN_BY, MODEL_TABLE)


PREVIOUS_TOKEN_HEAD = _pattern(
    "previous_token_head", "a head that puts most of its weight on the token just before the query", "mean weight")
FIRST_TOKEN_HEAD = _pattern(
    "first_token_head", "a head that puts most of its weight on the first token (an attention sink)", "mean weight")
UNIFORM_HEAD = _pattern(
    "uniform_head", "a head that spreads its weight evenly over the tokens it may see", "normalised entropy")
CODES = (PREVIOUS_TOKEN_HEAD, FIRST_TOKEN_HEAD, UNIFORM_HEAD)
HEAD_PATTERN_CODES = tuple(code.code for code in CODES)
_BY_SCORE = {code.code: code for code in CODES}


def head_scores(weights: np.ndarray) -> dict[str, np.ndarray]:
    """Per head (H,): mean weight on the previous token, on the first token, and the mean
    normalised entropy, over query rows 1..T-1. `weights`: (H, T, T), causal or not; key columns beyond
    the T queries' own (a sink column, as gpt-oss's eager code keeps it) are not read."""
    n = weights.shape[-2]
    weights = weights[..., :n]
    rows = np.arange(1, n)  # (T-1,)
    previous = weights[:, rows, rows - 1].mean(axis=-1)  # (H,)
    first = weights[:, 1:, 0].astype(np.float64).mean(axis=-1)  # (H,)
    # each row against the log of the keys it may see: the keys with weight (a causal row i: i+1 of
    # them; an encoder's: all T), so an even spread is 1 whatever the mask
    room = np.empty(weights.shape[-2:], dtype=np.float32)[1:]  # every head's logarithms, in one allocation
    entropy, support = (np.stack(per_head) for per_head in zip(*(_row_entropy(head[1:], room) for head in weights)))
    normalised = (entropy / np.log(np.maximum(support, 2))).mean(axis=-1)  # (H,)
    return {"previous_token_head": previous, "first_token_head": first, "uniform_head": normalised}


def _row_entropy(w: np.ndarray, room: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(rows,) entropy of each row of one head's (rows, T) weights, and (rows,) its keys with weight:
    one head at a time, its temporaries stay a head's size (`room`: float32, w's shape, reused by
    every head: a fresh zeroed array is paged in by the kernel, ~1,000 pages a head at 1,024
    tokens); the logarithm only where a weight is positive (a masked key counts 0), the products
    summed in float64 (einsum casts as it goes: no float64 copy of either operand)."""
    positive = w > 0
    logs = room
    logs.fill(0.0)
    np.log(w, out=logs, where=positive)
    entropy: np.ndarray = -np.einsum("ij,ij->i", w, logs, dtype=np.float64)
    return entropy, np.count_nonzero(positive, axis=-1)


def head_patterns(weights: np.ndarray | None, tokens: int | None = None) -> list[Finding]:
    """Info findings for the heads of one layer (`weights`: (batch, H, T, T)); none below 3 tokens.
    `tokens`: a padded batch's first text's length (its pads left out)."""
    if weights is not None and tokens is not None:
        weights = weights[:1, :, :tokens, :tokens]  # (1, H, t, t)
    if weights is None or weights.ndim != 4 or min(weights.shape[-2:]) < 3:
        return []
    scores = head_scores(weights[0])
    limits = {"previous_token_head": THRESHOLD, "first_token_head": THRESHOLD, "uniform_head": UNIFORM}
    findings = []
    for code, values in scores.items():
        heads = [int(h) for h in np.flatnonzero(values >= limits[code])]
        if heads:
            shown = ", ".join(f"head {h} ({values[h]:.2f})" for h in heads)
            findings.append(_BY_SCORE[code]("weights", heads=heads, shown=shown))
    return findings
