"""intervene=observe: no edit; every chosen layer's stages and its heads' patterns from one forward."""

from attnlab.model.edits.kind_base import EditKind


class Observe(EditKind):
    changes = False
    per_head = False


KIND = Observe()
