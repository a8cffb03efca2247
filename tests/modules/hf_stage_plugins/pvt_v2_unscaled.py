"""A copy of PvtV2SelfAttention without the 1/sqrt(head_dim) scaling (a planted mistake)."""

from _pvt_v2_copy import PvtV2Copy


class PvtV2Unscaled(PvtV2Copy):
    scaled = False  # planted
