"""The intervention kinds, one file each: an `EditKind` (attnlab.model.edits.kind_base) declaring the
settings it needs and shows, the stage it changes first, and its edit on the layer.
`intervene=NAME` applies KINDS[NAME]; adding a kind is one file here and one line in KINDS.
"""

from __future__ import annotations

from attnlab.model.edits import ablate_head, observe, patch, scale_scores, user_function
from attnlab.model.edits.kind_base import EditKind

# the registry: one line per kind, `intervene=NAME` -> what it does
KINDS: dict[str, EditKind] = {
    "observe": observe.KIND,
    "ablate_head": ablate_head.KIND,
    "scale_scores": scale_scores.KIND,
    "patch": patch.KIND,
    "function": user_function.KIND,
}

__all__ = ["KINDS", "EditKind"]
