"""The source's bonus PyTorchMultiHeadAttention (fused qkv, SDPA with is_causal=True), loaded from tests/fixtures/source.

Loaded from the source's own file rather than copied; the subclass only gives it the corpus's
constructor (d_in, d_out, context_length, dropout, num_heads, qkv_bias=False).
"""

import importlib.util
from pathlib import Path

SOURCE = Path(__file__).resolve().parents[1] / "fixtures" / "source" / "ch03.py"  # loaded as a plugin: by path
_spec = importlib.util.spec_from_file_location("attnlab_corpus_source_ch03", SOURCE)
_ch03 = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_ch03)


class BonusPyTorchMultiHeadAttention(_ch03.PyTorchMultiHeadAttention):
    def __init__(self, d_in, d_out, context_length, dropout, num_heads, qkv_bias=False):
        # the bonus class needs no context_length: SDPA's is_causal builds the mask per call
        super().__init__(d_in, d_out, num_heads, dropout=dropout, qkv_bias=qkv_bias)
