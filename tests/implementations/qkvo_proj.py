"""A Hugging Face-style attention block: q_proj, k_proj, v_proj, o_proj, grouped key/value heads, eager softmax."""

import torch
import torch.nn as nn


class QKVOAttention(nn.Module):
    def __init__(self, d_in, d_out, context_length, dropout, num_heads, qkv_bias=False, num_key_value_heads=None):
        super().__init__()
        self.num_heads = num_heads
        self.num_key_value_heads = num_key_value_heads or num_heads
        assert d_out % num_heads == 0 and num_heads % self.num_key_value_heads == 0
        self.head_dim = d_out // num_heads
        kv_width = self.num_key_value_heads * self.head_dim
        self.q_proj = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.k_proj = nn.Linear(d_in, kv_width, bias=qkv_bias)
        self.v_proj = nn.Linear(d_in, kv_width, bias=qkv_bias)
        self.o_proj = nn.Linear(d_out, d_out, bias=False)
        self.attention_dropout = dropout

    def forward(self, hidden_states):
        b, n, _ = hidden_states.shape
        q = self.q_proj(hidden_states).view(b, n, self.num_heads, self.head_dim).transpose(1, 2)  # (b, num_heads, num_tokens, head_dim)
        k = self.k_proj(hidden_states).view(b, n, self.num_key_value_heads, self.head_dim).transpose(1, 2)  # (b, num_kv_heads, num_tokens, head_dim)
        v = self.v_proj(hidden_states).view(b, n, self.num_key_value_heads, self.head_dim).transpose(1, 2)  # (b, num_kv_heads, num_tokens, head_dim)
        group = self.num_heads // self.num_key_value_heads
        k = k.repeat_interleave(group, dim=1)  # (b, num_heads, num_tokens, head_dim)
        v = v.repeat_interleave(group, dim=1)  # (b, num_heads, num_tokens, head_dim)
        scores = q @ k.transpose(2, 3) * self.head_dim ** -0.5  # (b, num_heads, num_tokens, num_tokens)
        causal = torch.full((n, n), float("-inf"), device=scores.device).triu(1)  # additive mask
        weights = torch.softmax(scores + causal, dim=-1, dtype=torch.float32).to(q.dtype)
        weights = nn.functional.dropout(weights, p=self.attention_dropout, training=self.training)
        out = (weights @ v).transpose(1, 2).reshape(b, n, -1)  # (b, num_tokens, d_out)
        return self.o_proj(out)
