"""A copy of Hugging Face's LlamaAttention with the heads merged without the transpose back (a planted mistake)."""

from _llama_copy import LlamaCopy


class LlamaHeadMerge(LlamaCopy):
    transpose_heads = False  # planted
