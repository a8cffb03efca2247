"""A copy of Hugging Face's LlamaAttention with rotary applied to the queries only (a planted mistake)."""

from _llama_copy import LlamaCopy


class LlamaRotaryQueriesOnly(LlamaCopy):
    rotate_keys = False  # planted
