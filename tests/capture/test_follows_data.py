"""Capture follows data, not call order: classes written here as other libraries write attention
(Meta's reference Llama KV cache, an einops-bucketed local attention, a loop over the batch, half-width
sub-heads, attention computed twice per forward, Hugging Face's DiffLlama: one softmax map on each half
of a split V). Each correct copy gives no error finding; a mistake
planted in each is found at its stage with its code. `mistake` plants one: "unscaled", "softmax_axis"
(softmax over the queries), "query_source" (queries from the key projection)."""

from __future__ import annotations

from pathlib import Path

import pytest

import attnlab
from tests._zoo_helpers import plugin_runner

HEADER = """
import math

import torch
import torch.nn as nn
import torch.nn.functional as F
from einops import rearrange


def scores_of(q, k, mistake):  # (..., q_tokens, k_tokens)
    attn_scores = q @ k.transpose(-2, -1)
    return attn_scores if mistake == "unscaled" else attn_scores / math.sqrt(q.shape[-1])


def softmax_of(attn_scores, mistake):
    return torch.softmax(attn_scores, dim=-2 if mistake == "softmax_axis" else -1)
"""

PLUGINS = {
    "kv_cache_llama": '''
class Attention(nn.Module):
    """Meta's reference Llama: keys and values written into a cache and read back from it."""

    def __init__(self, d_in, d_out, context_length, dropout, num_heads, qkv_bias=False, mistake="none",
                 write="slice"):
        super().__init__()
        self.n_heads, self.head_dim, self.mistake, self.write = num_heads, d_out // num_heads, mistake, write
        self.wq = nn.Linear(d_in, d_out, bias=False)
        self.wk = nn.Linear(d_in, d_out, bias=False)
        self.wv = nn.Linear(d_in, d_out, bias=False)
        self.wo = nn.Linear(d_out, d_out, bias=False)
        self.cache_k = torch.zeros(4, context_length, num_heads, self.head_dim)
        self.cache_v = torch.zeros(4, context_length, num_heads, self.head_dim)

    def forward(self, x, start_pos=0):
        bsz, seqlen, _ = x.shape
        xq = (self.wk if self.mistake == "query_source" else self.wq)(x).view(bsz, seqlen, self.n_heads, self.head_dim)
        xk = self.wk(x).view(bsz, seqlen, self.n_heads, self.head_dim)
        xv = self.wv(x).view(bsz, seqlen, self.n_heads, self.head_dim)
        self.cache_k = self.cache_k.to(xq)
        self.cache_v = self.cache_v.to(xq)
        keys, values = (self.written(cache, new, start_pos) for cache, new in ((self.cache_k, xk), (self.cache_v, xv)))
        xq, keys, values = xq.transpose(1, 2), keys.transpose(1, 2), values.transpose(1, 2)  # (B, nh, T, hs)
        mask = torch.full((seqlen, seqlen), float("-inf")).triu(1)
        attn_weights = softmax_of(scores_of(xq, keys, self.mistake) + mask, self.mistake)  # (B, nh, T, T)
        context_vec = (attn_weights @ values).transpose(1, 2).contiguous().view(bsz, seqlen, -1)
        return self.wo(context_vec)

    def written(self, cache, new, start):  # the cache holding `new` at tokens start.., read back up to its end
        bsz, end = new.shape[0], start + new.shape[1]
        if self.write == "slice":
            cache[:bsz, start:end] = new
        elif self.write == "copy":
            cache[:bsz, start:end].copy_(new)
        elif self.write == "index_copy":
            cache[:bsz].index_copy_(1, torch.arange(start, end), new)
        elif self.write == "index_put":
            cache.index_put_((torch.arange(bsz)[:, None], torch.arange(start, end)[None, :]), new)
        elif self.write == "cat":  # a cache that grows, as Hugging Face's DynamicCache does
            return torch.cat([cache[:bsz, :start], new], dim=1)
        return cache[:bsz, :end]
''',
    "local_buckets": '''
class LocalAttention(nn.Module):
    """lucidrains-style local attention: heads folded into the batch with einops, tokens cut into
    windows, each window looking at itself and the one before."""

    def __init__(self, d_in, d_out, context_length, dropout, num_heads, qkv_bias=False, window=2, mistake="none"):
        super().__init__()
        self.heads, self.window, self.mistake = num_heads, window, mistake
        self.to_q = nn.Linear(d_in, d_out, bias=False)
        self.to_k = nn.Linear(d_in, d_out, bias=False)
        self.to_v = nn.Linear(d_in, d_out, bias=False)
        self.to_out = nn.Linear(d_out, d_out)

    def forward(self, x):
        b, n, _ = x.shape
        q = (self.to_k if self.mistake == "query_source" else self.to_q)(x)
        q, k, v = (rearrange(t, "b n (h d) -> (b h) n d", h=self.heads) for t in (q, self.to_k(x), self.to_v(x)))
        w = n // self.window
        bq, bk, bv = (t.reshape(t.shape[0], w, self.window, t.shape[-1]) for t in (q, k, v))  # (B*nh, w, win, hs)
        bk, bv = (torch.cat([F.pad(t, (0, 0, 0, 0, 1, 0), value=0.0)[:, :-1], t], dim=2) for t in (bk, bv))
        attn_scores = scores_of(bq, bk, self.mistake)  # (B*nh, w, win, 2 * win)
        q_pos = torch.arange(n).view(w, self.window, 1)
        k_pos = torch.cat([q_pos - self.window, q_pos], dim=1).view(w, 1, 2 * self.window)
        hidden = (k_pos > q_pos) | (k_pos < 0)
        attn_weights = softmax_of(attn_scores.masked_fill(hidden, float("-inf")), self.mistake)
        context_vec = (attn_weights @ bv).reshape(-1, n, q.shape[-1])  # (B*nh, T, hs)
        return self.to_out(rearrange(context_vec, "(b h) n d -> b n (h d)", b=b))
''',
    "batch_loop": '''
class PerItemAttention(nn.Module):
    """Each batch item attended on its own, in a Python loop, the results stacked."""

    def __init__(self, d_in, d_out, context_length, dropout, num_heads, qkv_bias=False, mistake="none"):
        super().__init__()
        self.num_heads, self.head_dim, self.mistake = num_heads, d_out // num_heads, mistake
        self.W_query = nn.Linear(d_in, d_out, bias=False)
        self.W_key = nn.Linear(d_in, d_out, bias=False)
        self.W_value = nn.Linear(d_in, d_out, bias=False)
        self.out_proj = nn.Linear(d_out, d_out)

    def forward(self, x):
        items = []
        for item in x:  # (T, d_in)
            n = item.shape[0]
            q = (self.W_key if self.mistake == "query_source" else self.W_query)(item)
            q, k, v = (t.view(n, self.num_heads, self.head_dim).transpose(0, 1)
                       for t in (q, self.W_key(item), self.W_value(item)))  # (nh, T, hs)
            hidden = torch.ones(n, n, dtype=torch.bool).triu(1)
            attn_weights = softmax_of(scores_of(q, k, self.mistake).masked_fill(hidden, float("-inf")), self.mistake)
            items.append((attn_weights @ v).transpose(0, 1).reshape(n, -1))
        return self.out_proj(torch.stack(items))
''',
    "twice": '''
class TwiceAttention(nn.Module):
    """The attention computed twice per forward: once for the output, once more for the weights
    the module keeps to show (as a library's need_weights path does)."""

    def __init__(self, d_in, d_out, context_length, dropout, num_heads, qkv_bias=False, mistake="none"):
        super().__init__()
        self.num_heads, self.head_dim, self.mistake = num_heads, d_out // num_heads, mistake
        self.q_proj = nn.Linear(d_in, d_out, bias=False)
        self.k_proj = nn.Linear(d_in, d_out, bias=False)
        self.v_proj = nn.Linear(d_in, d_out, bias=False)
        self.o_proj = nn.Linear(d_out, d_out)

    def attend(self, q, k, v):
        n = q.shape[-2]
        hidden = torch.ones(n, n, dtype=torch.bool).triu(1)
        attn_weights = softmax_of(scores_of(q, k, self.mistake).masked_fill(hidden, float("-inf")), self.mistake)
        return attn_weights @ v, attn_weights

    def forward(self, x):
        b, n, _ = x.shape
        q = (self.k_proj if self.mistake == "query_source" else self.q_proj)(x)
        q, k, v = (t.view(b, n, self.num_heads, self.head_dim).transpose(1, 2)
                   for t in (q, self.k_proj(x), self.v_proj(x)))  # (B, nh, T, hs)
        context_vec, _ = self.attend(q, k, v)
        _, self.last_weights = self.attend(q, k, v)
        return self.o_proj(context_vec.transpose(1, 2).reshape(b, n, -1))
''',
    "sub_heads": '''
class DifferentialAttention(nn.Module):
    """Differential attention: each head's query and key split into two half-width sub-heads, two
    softmax maps, their difference applied to the values."""

    def __init__(self, d_in, d_out, context_length, dropout, num_heads, qkv_bias=False, lambda_=0.5,
                 mistake="none"):
        super().__init__()
        self.num_heads, self.head_dim, self.mistake = num_heads, d_out // num_heads, mistake
        self.lambda_ = lambda_
        self.q_proj = nn.Linear(d_in, d_out, bias=False)
        self.k_proj = nn.Linear(d_in, d_out, bias=False)
        self.v_proj = nn.Linear(d_in, d_out, bias=False)
        self.out_proj = nn.Linear(d_out, d_out)

    def forward(self, x):
        b, n, _ = x.shape
        q = (self.k_proj if self.mistake == "query_source" else self.q_proj)(x)
        q, k = (t.view(b, n, self.num_heads, 2, self.head_dim // 2).permute(0, 2, 3, 1, 4)
                for t in (q, self.k_proj(x)))  # (B, nh, 2, T, hs / 2)
        v = self.v_proj(x).view(b, n, self.num_heads, self.head_dim).transpose(1, 2)  # (B, nh, T, hs)
        hidden = torch.ones(n, n, dtype=torch.bool).triu(1)
        maps = [softmax_of(scores_of(q[:, :, i], k[:, :, i], self.mistake).masked_fill(hidden, float("-inf")),
                           self.mistake) for i in range(2)]
        attn_weights = maps[0] - self.lambda_ * maps[1]  # (B, nh, T, T)
        context_vec = (attn_weights @ v).transpose(1, 2).reshape(b, n, -1)
        return self.out_proj(context_vec)
''',
}

SIZES = dict(num_heads=2, d_out=8, inputs="random")
TOKENS = ["inputs.n_tokens=6", "inputs.d_in=5"]


@pytest.fixture
def library(tmp_path: Path, use_plugins):
    return plugin_runner(tmp_path / "library", PLUGINS, HEADER, use_plugins, TOKENS, **SIZES)


def errors(result) -> list[tuple[str, str]]:
    return [(f.code, f.stage) for f in result.findings if f.severity == "error"]


FOLLOWED = list(PLUGINS)


@pytest.mark.parametrize("name", FOLLOWED)
@pytest.mark.slow
def test_a_correct_copy_gives_no_error_finding(library, name):
    result = library(name)
    assert errors(result) == [], [(f.code, f.stage, f.message) for f in result.findings]


PLANTED = {"query_source": ("query_source", "queries"), "unscaled": ("scaling", "scaled_scores"),
           "softmax_axis": ("softmax_axis", "weights")}


@pytest.mark.slow
def test_stages_in_windows_are_named_not_observable_with_their_shapes(library):
    (note,) = library("local_buckets").findings
    assert (note.code, note.severity) == ("not_observable", "info")
    assert note.message.startswith("not observable: queries (4, 3, 2, 4), keys (4, 3, 4, 4), values (4, 3, 4, 4), "
                                   "scores (4, 3, 2, 4), scaled_scores (4, 3, 2, 4), weights (4, 3, 2, 4), "
                                   "context (4, 3, 2, 4): not 2 batch items of 6 rows each")


@pytest.mark.parametrize("write", ["copy", "index_copy", "index_put", "cat"])
def test_keys_and_values_written_into_a_cache_any_way_keep_their_source(library, write):
    assert errors(library("kv_cache_llama", f"write={write}")) == []
    assert errors(library("kv_cache_llama", f"write={write}", "mistake=query_source"))[:1] == [PLANTED["query_source"]]


@pytest.mark.parametrize("mistake", list(PLANTED))
@pytest.mark.parametrize("name", FOLLOWED)
def test_a_planted_mistake_is_found_at_its_stage_with_its_code(library, name, mistake):
    result = library(name, f"mistake={mistake}")
    assert errors(result)[:1] == [PLANTED[mistake]], [(f.code, f.stage, f.message) for f in result.findings]


# -- Hugging Face's DiffLlamaAttention: two kernel calls share the queries and keys, each on one half of V --

UNSCALED_DIFFLLAMA = '''
from transformers.models.diffllama.modeling_diffllama import DiffLlamaAttention


class UnscaledDiffLlama(DiffLlamaAttention):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.scaling = 1.0  # planted
'''


@pytest.fixture
def diffllama(tmp_path: Path, use_plugins):
    pytest.importorskip("transformers.models.diffllama", reason="the Hugging Face class is the code under test")
    (tmp_path / "unscaled_diffllama.py").write_text(UNSCALED_DIFFLLAMA)
    use_plugins(tmp_path)

    def run(name: str, implementation: str):
        result = attnlab.run(name, overrides=["inputs.n_tokens=6", "inputs.d_in=16",
                                              f"attn_implementation={implementation}"], num_heads=4, d_out=16,
                             inputs="random")
        assert result.record.status == "ok", result.record.error
        return result

    return run


@pytest.mark.parametrize("implementation", ["eager", "sdpa"])
@pytest.mark.slow
def test_diffllama_s_split_values_are_not_observable_and_a_planted_mistake_is_found(diffllama, implementation):
    result = diffllama("hf:diffllama", implementation)
    assert errors(result) == [], [(f.code, f.stage, f.message) for f in result.findings]
    (note,) = [f for f in result.findings if f.code == "not_observable"]
    assert note.message.startswith("not observable: values (2, 4, 6, 4), context (2, 4, 6, 4): the same weights "
                                   "multiplied with 2 different values tensors")
    assert "rotary" in {f.code for f in result.findings}
    planted = diffllama("unscaled_diffllama", implementation)
    assert errors(planted)[:1] == [PLANTED["unscaled"]], [(f.code, f.stage, f.message) for f in planted.findings]
