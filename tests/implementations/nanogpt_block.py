"""A nanoGPT-style CausalSelfAttention: fused c_attn, c_proj, the flash path through SDPA."""

import torch.nn as nn
import torch.nn.functional as F


class NanoGPTCausalSelfAttention(nn.Module):
    def __init__(self, d_in, d_out, context_length, dropout, num_heads, qkv_bias=False):
        super().__init__()
        assert d_out % num_heads == 0
        self.n_head, self.n_embd, self.dropout = num_heads, d_out, dropout
        self.c_attn = nn.Linear(d_in, 3 * d_out, bias=qkv_bias)  # queries, keys, values in one matmul
        self.c_proj = nn.Linear(d_out, d_out)
        self.resid_dropout = nn.Dropout(dropout)

    def forward(self, x):
        B, T, _ = x.size()
        q, k, v = self.c_attn(x).split(self.n_embd, dim=2)  # 3 x (b, num_tokens, d_out)
        k = k.view(B, T, self.n_head, -1).transpose(1, 2)  # (b, num_heads, num_tokens, head_dim)
        q = q.view(B, T, self.n_head, -1).transpose(1, 2)  # (b, num_heads, num_tokens, head_dim)
        v = v.view(B, T, self.n_head, -1).transpose(1, 2)  # (b, num_heads, num_tokens, head_dim)
        y = F.scaled_dot_product_attention(
            q, k, v, attn_mask=None, dropout_p=self.dropout if self.training else 0, is_causal=True
        )  # (b, num_heads, num_tokens, head_dim)
        y = y.transpose(1, 2).contiguous().view(B, T, self.n_embd)  # (b, num_tokens, d_out)
        return self.resid_dropout(self.c_proj(y))
