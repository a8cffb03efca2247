"""A copy of Hugging Face's LlamaAttention with the causal mask shifted by one (each query also sees the next token) (a planted mistake)."""

from _llama_copy import LlamaCopy


class LlamaMaskOffset(LlamaCopy):
    mask_diagonal = 2  # planted
