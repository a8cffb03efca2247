"""A copy of Hugging Face's LlamaAttention with its values computed by k_proj (a planted mistake)."""

from _llama_copy import LlamaCopy


class LlamaValuesFromKeys(LlamaCopy):
    values_proj = "k_proj"  # planted
