"""The intervention finding's measure of a padded batch: a pad's context vectors are no text's."""

from __future__ import annotations

from types import SimpleNamespace

import torch

from attnlab.model.edit_findings import edit_findings
from attnlab.model.interventions import Intervention


def test_a_pads_context_is_never_measured() -> None:
    own = torch.zeros(2, 2, 5, 3)  # (b, H, T, hs): texts of 3 and 5 tokens
    edited = own.clone()
    edited[:, 1, :3] = 0.5  # head 1 moved by 0.5 at the texts' positions
    edited[0, 1, 3:] = 100.0  # and by 100 at the first text's pads
    captures = [SimpleNamespace(stages={"context": c}, lengths=(3, 5)) for c in (edited, own)]
    found = edit_findings(Intervention("ablate_head", head=1), *captures, [])
    assert "max |Δ context| head 1 0.5)" in found[0].message
    captures[1].lengths = None  # unpadded: every position is a text's
    assert "max |Δ context| head 1 100.0)" in edit_findings(Intervention("ablate_head", head=1), *captures, [])[0].message
