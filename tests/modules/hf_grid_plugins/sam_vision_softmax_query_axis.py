"""A copy of SamVisionAttention with the softmax taken over the query axis (a planted mistake)."""

from _sam_vision_copy import SamVisionCopy


class SamVisionSoftmaxQueryAxis(SamVisionCopy):
    softmax_dim = -2  # planted
