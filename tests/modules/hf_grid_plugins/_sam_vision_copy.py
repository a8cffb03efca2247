"""SamVisionAttention.forward of transformers 5.25.0 (relative positions left out), copied so that a
planted mistake can be written into one line: `softmax_dim = -2` takes the softmax over the queries."""

import torch
from transformers.models.sam.modeling_sam import SamVisionAttention


class SamVisionCopy(SamVisionAttention):
    softmax_dim = -1

    def __init__(self, config, window_size=0):
        super().__init__(config, window_size)

    def forward(self, hidden_states, output_attentions=None):
        batch_size, height, width, _ = hidden_states.shape
        qkv = (self.qkv(hidden_states).reshape(batch_size, height * width, 3, self.num_attention_heads, -1)
               .permute(2, 0, 3, 1, 4))
        query, key, value = qkv.reshape(3, batch_size * self.num_attention_heads, height * width, -1).unbind(0)
        attn_weights = (query * self.scale) @ key.transpose(-2, -1)
        attn_weights = torch.nn.functional.softmax(attn_weights, dtype=torch.float32, dim=self.softmax_dim)
        attn_output = (attn_weights @ value).reshape(batch_size, self.num_attention_heads, height, width, -1)
        attn_output = attn_output.permute(0, 2, 3, 1, 4).reshape(batch_size, height, width, -1)
        return self.proj(attn_output), attn_weights
