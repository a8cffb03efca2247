"""A copy of Hugging Face's LlamaAttention with the softmax taken over the query axis (a planted mistake)."""

from _llama_copy import LlamaCopy


class LlamaSoftmaxQueryAxis(LlamaCopy):
    softmax_dim = -2  # planted
