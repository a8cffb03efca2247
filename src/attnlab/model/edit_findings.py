"""What an intervention did to a layer, said as the edit it is (attnlab.model.interventions).

The edited layer is the layer's own module with the edit in force, compared with itself unedited:
every difference from the edited stage on is the edit's, never a bug of the layer. So its record
holds one info finding naming the edit and measuring it on the stages (the edited heads' context
vectors, or each edited head's factor between its scores and its softmax input), in place of the
findings a difference raises; a difference before that stage, which the edit cannot make, keeps
every finding beside the edit's.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from attnlab.capture.recorder import Capture
from attnlab.capture.stages import STAGES
from attnlab.diagnosis.diagnostics import scale_observed
from attnlab.diagnosis.finding_code import MODEL_TABLE, Code
from attnlab.diagnosis.masking import with_masks_as_neg_inf
from attnlab.diagnosis.message_format import fmt
from attnlab.model.edits import KINDS
from attnlab.model.inputs import real_positions
from attnlab.model.interventions import Intervention
from attnlab.record import Finding

INTERVENTION = Code(
    "intervention", ("context", "scaled_scores"), "info",
    "the edit intervene= made to the layer, measured on its stages against the unedited layer's",
    {"context": "the edit {label}: {named} context vectors {what} (max |Δ context| {moves}); the stages before the "
                "context are the layer's own",
     "scaled_scores": "the edit {label}: {named} softmax input times {factor}; the factor between the scores and the "
                      "softmax input is {factors}; {kept}"},
    "the edit `intervene=` made (a head ablated or patched, a function's contexts, scores scaled), measured on the "
    "stages against the unedited layer's, in place of the findings the difference would raise",
    ("tests/model/test_interventions.py::test_an_edit_is_named_as_the_edit_it_is_and_no_error",), MODEL_TABLE)
CODES = (INTERVENTION,)


def edited_stage(chosen: Intervention) -> str:
    """The first stage the edit changes: the softmax input, or the context vectors."""
    return KINDS[chosen.kind].stage


def edit_findings(chosen: Intervention, edited: Capture, own: Capture, found: Sequence[Finding]) -> list[Finding]:
    """`found` (the diagnosis of `edited` against `own`) replaced by the edit's finding, where
    every stage before the edited one is the layer's own."""
    at = STAGES.index(edited_stage(chosen))
    untouched = all(torch.equal(edited.stages[s], own.stages[s]) for s in STAGES[:at]
                    if s in edited.stages and s in own.stages)
    said = _scaled(chosen, edited, own) if edited_stage(chosen) == "scaled_scores" else _contexts(chosen, edited, own)
    return [said] if untouched else [*found, said]


def _heads(chosen: Intervention, n_heads: int) -> list[int]:
    return list(range(n_heads)) if chosen.head is None else [chosen.head]


def _contexts(chosen: Intervention, edited: Capture, own: Capture) -> Finding:
    """An edit of the context vectors (ablate_head, patch, function): how far each head's moved."""
    mine, theirs = edited.stages["context"], own.stages["context"]  # (b, H, T, hs)
    difference = (mine.float() - theirs.float()).abs()  # (b, H, T, hs)
    if own.lengths:  # a padded batch: a pad's context is no text's
        difference *= real_positions(own.lengths, difference.shape[2])[:, None, :, None]
    moved = difference.amax(dim=(0, 2, 3))  # (H,)
    changed = [int(h) for h in torch.nonzero(moved > 0).flatten()]
    kind = KINDS[chosen.kind]
    heads = _heads(chosen, mine.shape[1]) if kind.heads_known else changed
    moves = ", ".join(f"head {h} {fmt(float(moved[h]))}" for h in (heads or range(mine.shape[1])))
    return INTERVENTION("context", "context", heads=heads or None, label=chosen.label,
                        named=_named(chosen, mine.shape[1]), what=kind.what(chosen), moves=moves)


def _scaled(chosen: Intervention, edited: Capture, own: Capture) -> Finding:
    """scale_scores: each edited head's factor between its scores and its softmax input, and the model's own."""
    mine, theirs = with_masks_as_neg_inf(edited), with_masks_as_neg_inf(own)
    n_heads = mine.stages["scaled_scores"].shape[1]
    heads = _heads(chosen, n_heads)
    factors = ", ".join(f"head {h} {fmt(_factor(mine, h))} (the model's own {fmt(_factor(theirs, h))})" for h in heads)
    kept = _mask_kept(mine, theirs)
    return INTERVENTION("scaled_scores", "scaled_scores", heads=heads, label=chosen.label,
                        named=_named(chosen, n_heads), factor=fmt(chosen.factor), factors=factors, kept=kept)


def _factor(capture: Capture, head: int) -> float:
    s = capture.stages
    return scale_observed(s["scores"][:, head], s["scaled_scores"][:, head])


def _mask_kept(mine: Capture, theirs: Capture) -> str:
    """Whether every cell the model masks is still masked after the edit (and no other is)."""
    masked, own_masked = (torch.isneginf(c.stages["scaled_scores"]) for c in (mine, theirs))
    if torch.equal(masked, own_masked):
        return f"the model's mask kept ({int(own_masked.sum())} masked cells)" if bool(own_masked.any()) else "no mask"
    return (f"the mask changed: {int((own_masked & ~masked).sum())} of the model's {int(own_masked.sum())} masked "
            f"cells unmasked, {int((masked & ~own_masked).sum())} others masked")


def _named(chosen: Intervention, n_heads: int) -> str:
    return f"head {chosen.head}'s" if chosen.head is not None else f"every head's ({n_heads})"
