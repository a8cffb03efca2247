"""Dropout without its rescaling (section 3.5.2): attention weights zeroed at random and the rest
left as they were, where dropout multiplies each kept weight by 1/(1 - p) so that a query's
weights still sum to 1 on average and the context keeps its size between training and eval."""

from __future__ import annotations

import torch

from attnlab.diagnosis.checks.softmax_dropout import DROPOUT_RTOL, dropout_drawn
from attnlab.diagnosis.context import Context, Found
from attnlab.diagnosis.finding_code import Code, finds
from attnlab.record import Finding

DROPOUT_UNSCALED = Code(
    "dropout_unscaled", ("weights_applied",), "error",
    "attention weights zeroed as dropout zeroes them, the rest not multiplied by 1/(1 - p)",
    "{share}% of the attention weights as applied to the values (weights_applied) were zeroed and the rest kept as "
    "they were, not multiplied by 1/(1 - p): a dropout without its rescaling, so a query's weights sum to {row_sum} "
    "on average instead of 1 and the context shrinks by that factor; divide the kept weights by 1 - p, as "
    "nn.Dropout(dropout) and F.dropout do (section 3.5.2).",
    "weights zeroed at random and the rest left as they were (a hand-written dropout without the 1/(1-p) "
    "rescaling), so each query's weights as applied sum to about 1 - p",
    ("tests/diagnosis/test_dropout_scale.py::test_a_dropout_that_does_not_rescale_is_dropout_unscaled",), "heads")


@finds(DROPOUT_UNSCALED)
def dropout_unscaled(ctx: Context, found: Found) -> list[Finding]:
    if found.at("weights", "weights_applied"):
        return []  # zeros a finding before it names (a mask applied after the softmax)
    drawn = dropout_drawn(ctx)
    if drawn is None or abs(drawn.factor - 1) > DROPOUT_RTOL:
        return []
    if ctx.ref_mask is not None and torch.equal(drawn.dropped, ctx.ref_mask.expand_as(drawn.dropped)):
        return []  # the reference's mask, not a draw
    return [DROPOUT_UNSCALED("weights_applied", share=100 * drawn.share, row_sum=drawn.row_sum)]
