"""The source's MultiHeadAttention of a declared kind: causal or bidirectional, with or without an
output projection, with num_kv_heads key/value heads. `reference=auto` picks these for modules
that declare the kind: an encoder's attention (`is_causal = False`, as Hugging Face's BERT sets
it), a self-attention whose output projection lives elsewhere (BertSelfAttention's is in
BertSelfOutput), and a config-built class with its config's key/value head count.
"""

import torch
import torch.nn as nn

import attnlab


@attnlab.variant("bidirectional_attention", params={"causal": False},
                 description="MultiHeadAttention without a causal mask: every query sees every key (an encoder's)")
@attnlab.variant("bidirectional_heads", params={"causal": False, "out_proj": False},
                 description="bidirectional_attention without out_proj: the heads' context merged, not projected")
@attnlab.variant("causal_heads", params={"out_proj": False},
                 description="MultiHeadAttention without out_proj: the heads' context merged, not projected")
class DeclaredAttention(nn.Module):
    mask: torch.Tensor  # a buffer (register_buffer in __init__), declared so a type checker reads it as a tensor

    def __init__(self, d_in: int, d_out: int, context_length: int, dropout: float, num_heads: int,
                 num_kv_heads: int | None = None, qkv_bias: bool = False, causal: bool = True,
                 out_proj: bool = True) -> None:
        super().__init__()
        assert d_out % num_heads == 0, "d_out must be divisible by num_heads"
        self.num_kv_heads = num_kv_heads or num_heads
        assert num_heads % self.num_kv_heads == 0, "num_heads must be divisible by num_kv_heads"
        self.d_out = d_out
        self.num_heads = num_heads
        self.head_dim = d_out // num_heads
        self.is_causal = causal
        self.W_query = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_key = nn.Linear(d_in, self.num_kv_heads * self.head_dim, bias=qkv_bias)
        self.W_value = nn.Linear(d_in, self.num_kv_heads * self.head_dim, bias=qkv_bias)
        self.out_proj = nn.Linear(d_out, d_out) if out_proj else None
        self.dropout = nn.Dropout(dropout)
        self.register_buffer("mask", torch.triu(torch.ones(context_length, context_length), diagonal=1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, num_tokens, d_in = x.shape  # (b, num_tokens, d_in)
        group = self.num_heads // self.num_kv_heads  # query heads per key/value head
        queries = self.W_query(x).view(b, num_tokens, self.num_heads, self.head_dim).transpose(1, 2)  # (b, num_heads, num_tokens, head_dim)
        keys = self.W_key(x).view(b, num_tokens, self.num_kv_heads, self.head_dim).transpose(1, 2)  # (b, num_kv_heads, num_tokens, head_dim)
        values = self.W_value(x).view(b, num_tokens, self.num_kv_heads, self.head_dim).transpose(1, 2)  # (b, num_kv_heads, num_tokens, head_dim)
        keys = keys.repeat_interleave(group, dim=1)  # (b, num_heads, num_tokens, head_dim)
        values = values.repeat_interleave(group, dim=1)  # (b, num_heads, num_tokens, head_dim)

        attn_scores = queries @ keys.transpose(2, 3)  # (b, num_heads, num_tokens, num_tokens)
        if self.is_causal:
            attn_scores.masked_fill_(self.mask.bool()[:num_tokens, :num_tokens], -torch.inf)
        attn_weights = torch.softmax(attn_scores / keys.shape[-1] ** 0.5, dim=-1)  # (b, num_heads, num_tokens, num_tokens)
        attn_weights = self.dropout(attn_weights)  # (b, num_heads, num_tokens, num_tokens)

        context_vec: torch.Tensor = (attn_weights @ values).transpose(1, 2).reshape(b, num_tokens, self.d_out)  # (b, num_tokens, d_out)
        if self.out_proj is not None:
            context_vec = self.out_proj(context_vec)  # (b, num_tokens, d_out)
        return context_vec
