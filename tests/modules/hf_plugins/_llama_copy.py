"""LlamaAttention.forward and eager_attention_forward of transformers 5.23.0, copied so that a
planted mistake can be written into one line; each flag plants one."""

import torch
from torch import nn
from transformers.models.llama.modeling_llama import LlamaAttention, apply_rotary_pos_emb, repeat_kv


def eager_attention_forward(module, query, key, value, attention_mask, scaling, dropout=0.0, softmax_dim=-1):
    key_states = repeat_kv(key, module.num_key_value_groups)
    value_states = repeat_kv(value, module.num_key_value_groups)

    attn_weights = torch.matmul(query, key_states.transpose(2, 3)) * scaling
    if attention_mask is not None:
        attn_weights = attn_weights + attention_mask

    attn_weights = nn.functional.softmax(attn_weights, dim=softmax_dim, dtype=torch.float32).to(query.dtype)
    attn_weights = nn.functional.dropout(attn_weights, p=dropout, training=module.training)
    attn_output = torch.matmul(attn_weights, value_states)
    return attn_output, attn_weights


class LlamaCopy(LlamaAttention):
    rotate_keys = True
    mask_diagonal = None  # a causal mask of its own, triu(diagonal): 1 is the right one
    softmax_dim = -1
    transpose_heads = True
    values_proj = "v_proj"  # the projection the values come from

    def forward(self, hidden_states, position_embeddings=None, attention_mask=None, past_key_values=None, **kwargs):
        input_shape = hidden_states.shape[:-1]
        hidden_shape = (*input_shape, -1, self.head_dim)

        query_states = self.q_proj(hidden_states).view(hidden_shape).transpose(1, 2)
        key_states = self.k_proj(hidden_states).view(hidden_shape).transpose(1, 2)
        value_states = getattr(self, self.values_proj)(hidden_states).view(hidden_shape).transpose(1, 2)

        cos, sin = position_embeddings
        rotated_queries, rotated_keys = apply_rotary_pos_emb(query_states, key_states, cos, sin)
        query_states = rotated_queries
        key_states = rotated_keys if self.rotate_keys else key_states

        if self.mask_diagonal is not None:
            tokens = input_shape[-1]
            hidden = torch.ones(tokens, tokens, dtype=torch.bool).triu(self.mask_diagonal)
            attention_mask = torch.zeros(tokens, tokens).masked_fill(hidden, torch.finfo(query_states.dtype).min)

        attn_output, attn_weights = eager_attention_forward(
            self, query_states, key_states, value_states, attention_mask,
            dropout=0.0 if not self.training else self.attention_dropout, scaling=self.scaling,
            softmax_dim=self.softmax_dim,
        )
        if self.transpose_heads:
            attn_output = attn_output.transpose(1, 2)
        attn_output = attn_output.reshape(*input_shape, -1).contiguous()
        attn_output = self.o_proj(attn_output)
        return attn_output, attn_weights
