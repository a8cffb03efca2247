"""PvtV2SelfAttention.forward of transformers 5.25.0 (its spatial-reduction path), copied so that a
planted mistake can be written into one line; each flag plants one."""

import math

import torch
from torch import nn
from transformers.models.pvt_v2.modeling_pvt_v2 import PvtV2SelfAttention


class PvtV2Copy(PvtV2SelfAttention):
    softmax_dim = -1
    scaled = True

    def forward(self, hidden_states, height, width, output_attentions=False):
        batch_size, seq_len, num_channels = hidden_states.shape
        query_layer = self.transpose_for_scores(self.query(hidden_states))
        if self.spatial_reduction_ratio > 1:
            hidden_states = hidden_states.permute(0, 2, 1).reshape(batch_size, num_channels, height, width)
            hidden_states = self.spatial_reduction(hidden_states).reshape(batch_size, num_channels, -1).permute(0, 2, 1)
            hidden_states = self.layer_norm(hidden_states)
        key_layer = self.transpose_for_scores(self.key(hidden_states))
        value_layer = self.transpose_for_scores(self.value(hidden_states))
        attention_scores = torch.matmul(query_layer, key_layer.transpose(-1, -2))
        if self.scaled:
            attention_scores = attention_scores / math.sqrt(self.attention_head_size)
        attention_probs = nn.functional.softmax(attention_scores, dim=self.softmax_dim)
        context_layer = (attention_probs @ value_layer).transpose(1, 2).reshape(batch_size, seq_len, num_channels)
        return (self.proj(context_layer),)
