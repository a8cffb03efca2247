"""Forward arguments by name: the book package's `GroupedQueryAttention.forward(x, mask,
cos, sin)`, nn.MultiheadAttention imported bare, and a required argument nothing provides, refused
before any work."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import attnlab
from attnlab.errors import UserError
from attnlab.modules.built import BY_NAME_CALL, plan
from tests.modules.hf_runs import SIZES

VALUES = {"d_in": 64, "d_out": 64, "num_heads": 4, "n_tokens": 8, "dropout": 0.0, "qkv_bias": False}

# llms_from_scratch's ch05 Llama 3 code (its package pulls tensorflow: written here in its style)
BOOK_GQA = '''
import torch
import torch.nn as nn


def compute_rope_params(head_dim, theta_base=10_000, context_length=4096, dtype=torch.float32):
    inv_freq = 1.0 / (theta_base ** (torch.arange(0, head_dim, 2, dtype=dtype)[: (head_dim // 2)].float() / head_dim))
    positions = torch.arange(context_length, dtype=dtype)
    angles = positions.unsqueeze(1) * inv_freq.unsqueeze(0)  # (context_length, head_dim // 2)
    angles = torch.cat([angles, angles], dim=1)  # (context_length, head_dim)
    return torch.cos(angles), torch.sin(angles)


def apply_rope(x, cos, sin):
    batch_size, num_heads, seq_len, head_dim = x.shape
    x1, x2 = x[..., : head_dim // 2], x[..., head_dim // 2:]
    cos = cos[:seq_len, :].unsqueeze(0).unsqueeze(0)  # (1, 1, seq_len, head_dim)
    sin = sin[:seq_len, :].unsqueeze(0).unsqueeze(0)
    rotated = torch.cat((-x2, x1), dim=-1)
    return ((x * cos) + (rotated * sin)).to(dtype=x.dtype)


class GroupedQueryAttention(nn.Module):
    def __init__(self, d_in, d_out, num_heads, num_kv_groups, dtype=None):
        super().__init__()
        self.d_out, self.num_heads, self.head_dim = d_out, num_heads, d_out // num_heads
        self.num_kv_groups, self.group_size = num_kv_groups, num_heads // num_kv_groups
        self.W_key = nn.Linear(d_in, num_kv_groups * self.head_dim, bias=False, dtype=dtype)
        self.W_value = nn.Linear(d_in, num_kv_groups * self.head_dim, bias=False, dtype=dtype)
        self.W_query = nn.Linear(d_in, d_out, bias=False, dtype=dtype)
        self.out_proj = nn.Linear(d_out, d_out, bias=False, dtype=dtype)

    def forward(self, x, mask, cos, sin):
        b, num_tokens, d_in = x.shape
        queries = self.W_query(x).view(b, num_tokens, self.num_heads, self.head_dim).transpose(1, 2)
        keys = self.W_key(x).view(b, num_tokens, self.num_kv_groups, self.head_dim).transpose(1, 2)
        values = self.W_value(x).view(b, num_tokens, self.num_kv_groups, self.head_dim).transpose(1, 2)
        keys, queries = apply_rope(keys, cos, sin), apply_rope(queries, cos, sin)
        keys = keys.repeat_interleave(self.group_size, dim=1)
        values = values.repeat_interleave(self.group_size, dim=1)
        attn_scores = queries @ keys.transpose(2, 3)
        attn_scores = attn_scores.masked_fill(mask, -torch.inf)
        attn_weights = torch.softmax(attn_scores / keys.shape[-1] ** 0.5, dim=-1)
        context_vec = (attn_weights @ values).transpose(1, 2).reshape(b, num_tokens, self.d_out)
        return self.out_proj(context_vec)
'''


@pytest.fixture
def book_gqa(use_plugins, plugin_folder):
    use_plugins(plugin_folder("book_gqa", BOOK_GQA))
    return "book_gqa"


@pytest.mark.slow
def test_the_books_gqa_gets_its_bool_mask_and_rope_by_name(book_gqa):
    built = plan(book_gqa, VALUES).build(123)
    x = torch.rand(2, 8, 64, generator=torch.Generator().manual_seed(1))  # (b, T, d_in)
    source = type(built.module).__module__
    import sys

    cos, sin = sys.modules[source].compute_rope_params(16, context_length=8)  # the book's own, head_dim 16
    mask = torch.triu(torch.ones(8, 8, dtype=torch.bool), diagonal=1)  # ch05: True above the diagonal
    expected = built.module(x, mask, cos, sin)
    assert torch.equal(BY_NAME_CALL.call(built.module, x).output, expected)
    assert built.convention is BY_NAME_CALL


def test_the_books_gqa_runs_and_no_finding_is_an_error(book_gqa):
    result = attnlab.run(book_gqa, overrides=SIZES)
    assert result.record.status == "ok", result.record.error
    assert not [f for f in result.findings if f.severity == "error"], result.findings


@pytest.mark.slow
def test_nn_multiheadattention_imported_bare_is_called_with_query_key_value(use_plugins, plugin_folder):
    use_plugins(plugin_folder("torch_bare", "from torch.nn import MultiheadAttention\n"))
    built = plan("torch_bare", VALUES).build(123)
    mha = built.module
    x = torch.rand(2, 8, 64, generator=torch.Generator().manual_seed(1))  # (b, T, d_in)
    q, k, v = F.linear(x, mha.in_proj_weight, mha.in_proj_bias).chunk(3, dim=-1)  # (b, T, d_out) each
    heads = [t.view(2, 8, 4, 16).transpose(1, 2) for t in (q, k, v)]  # (b, nh, T, hs)
    context_vec = F.scaled_dot_product_attention(*heads).transpose(1, 2).reshape(2, 8, 64)
    expected = mha.out_proj(context_vec)
    assert torch.allclose(BY_NAME_CALL.call(mha, x).output, expected, atol=1e-6)
    result = attnlab.run("torch_bare", overrides=[*SIZES, "reference=bidirectional_attention"])
    assert result.record.status == "ok" and result.findings == [], result.record.error


@pytest.mark.slow
def test_a_required_argument_nothing_provides_is_refused_before_any_work(use_plugins, plugin_folder):
    use_plugins(plugin_folder("needs_memory", '''
        import torch.nn as nn

        class NeedsMemory(nn.Module):
            def __init__(self, d_in, d_out):
                super().__init__()
                self.W = nn.Linear(d_in, d_out)

            def forward(self, x, memory_bank):
                return self.W(x)
    '''))
    with pytest.raises(UserError) as raised:
        attnlab.run("needs_memory")
    message = str(raised.value)
    assert "'memory_bank'" in message and "variant.params" in message and len(message) <= 200
    assert "\n" not in message


@pytest.mark.slow
def test_a_module_taking_exactly_its_window_is_probed_at_the_runs_token_count(use_plugins, plugin_folder):
    """Swin's window attention accepts exactly window_size tokens; the 3-token probe must not kill it."""
    use_plugins(plugin_folder("window_only", '''
        import torch
        import torch.nn as nn
        import torch.nn.functional as F

        class WindowAttention(nn.Module):
            def __init__(self, dim, num_heads, window_size=8):
                super().__init__()
                self.num_heads, self.window_size = num_heads, window_size
                self.qkv = nn.Linear(dim, dim * 3)
                self.proj = nn.Linear(dim, dim)

            def forward(self, x):
                B, N, C = x.shape
                if N != self.window_size:
                    raise ValueError(f"expected {self.window_size} tokens, got {N}")
                q, k, v = self.qkv(x).reshape(B, N, 3, self.num_heads, C // self.num_heads).permute(2, 0, 3, 1, 4)
                return self.proj(F.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(B, N, C))
    '''))
    result = attnlab.run("window_only", overrides=[*SIZES, "reference=bidirectional_attention"])
    assert result.record.status == "ok" and result.findings == [], result.record.error
