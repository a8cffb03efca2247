"""A copy of PvtV2SelfAttention with the softmax taken over the query axis (a planted mistake)."""

from _pvt_v2_copy import PvtV2Copy


class PvtV2SoftmaxQueryAxis(PvtV2Copy):
    softmax_dim = -2  # planted
