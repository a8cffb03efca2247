"""A copy of PvtV2SelfAttention as transformers writes it: no mistake."""

from _pvt_v2_copy import PvtV2Copy


class PvtV2Correct(PvtV2Copy):
    pass
