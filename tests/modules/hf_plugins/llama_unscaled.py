"""Hugging Face's LlamaAttention with the 1/sqrt(head_dim) scaling left out (a planted mistake)."""

from transformers.models.llama.modeling_llama import LlamaAttention


class LlamaUnscaled(LlamaAttention):
    def __init__(self, config, layer_idx):
        super().__init__(config, layer_idx)
        self.scaling = 1.0  # planted: the config declares no such scale
