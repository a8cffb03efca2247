"""A copy of SamVisionAttention as transformers writes it (relative positions left out): no mistake."""

from _sam_vision_copy import SamVisionCopy


class SamVisionCorrect(SamVisionCopy):
    pass
